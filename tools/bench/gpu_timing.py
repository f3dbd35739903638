"""Timers shared by the GPU benchmarks, each in microseconds per call of fn, after one untimed call (compiles and
loads the kernel): GPU time of back-to-back launches or of a CUDA graph of them (launch overhead excluded), and eager
wall time of synchronized calls (launch overhead included)."""

import time

import torch


def events_us(fn, repeat: int) -> float:
    """GPU time per call of `repeat` back-to-back launches, timed with CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / repeat


def graph_us(fn, repeat: int) -> float:
    """GPU time per call, from a CUDA graph holding `repeat` calls (captured on a side stream, as torch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / repeat


def eager_us(fn, repeat: int) -> float:
    """Wall time per synchronized call."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / repeat
