"""Helpers shared by the CPU benchmarks: timing, the machine line, and the table of throughput beside a copy."""

import argparse
import time

import torch

import bnb


def weight_shapes(text: str) -> list:
    """argparse type of a list of weight shapes, "NxK,NxK" (empty: none): [(N, K), ...], each N and K positive."""
    shapes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        dims = item.lower().split("x")
        if len(dims) != 2 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"a weight shape is NxK with positive N and K, got {item!r}")
        shapes.append((int(dims[0]), int(dims[1])))
    return shapes


def best_seconds(fn, repeat: int) -> float:
    """The fastest of `repeat` timed calls of fn, after one untimed warm-up (page faults, thread-pool start)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def call_seconds(fn, calls: int) -> list:
    """Each of `calls` timed calls of fn, the first included (no warm-up): a latency distribution, first call and
    tail as a user meets them, where best_seconds keeps only the fastest."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def percentile(times, q: float) -> float:
    """The q-quantile (0..1) of times, nearest rank."""
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def machine_line() -> str:
    return (f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
            f"ISA {bnb._C.cpu_isa()}")


def thread_scaling_line(rounds: int = 9) -> str:
    """How much faster all of torch's threads quantize an in-cache tensor than one thread does: a figure of the
    machine, not of the kernels. On a VM whose vCPUs are separate cores it is near the thread count; where the host
    runs them on one core's two hardware threads it falls to ~1.2-1.5, and with it every compute-bound row of the
    tables (the quantizers most), while the copy, bound by memory, keeps its speed. Rounds alternate one thread and
    all of them, as the machine's mode can change within seconds."""
    threads = torch.get_num_threads()
    if threads < 2:
        return "thread scaling: 1 thread, nothing to compare"
    grain = 1 << 16  # cpu.grain_elements' default: each thread takes 64K float32 elements, 256 KB, in its L2
    x = torch.randn(threads * grain)
    code = bnb.functional.create_dynamic_map()
    q, absmax = torch.ops.bnb.quantize_blockwise(x, code, 4096)

    def run():
        for _ in range(32):
            torch.ops.bnb.quantize_blockwise_into(x, code, 4096, q, absmax)

    ratios = []
    for _ in range(rounds):
        with bnb.config.override(cpu__threads=1, cpu__grain_elements=grain):
            one = best_seconds(run, 2)
        with bnb.config.override(cpu__threads=threads, cpu__grain_elements=grain):
            many = best_seconds(run, 2)
        ratios.append(one / many)
    ratios.sort()
    return (f"thread scaling: {threads} threads quantize in cache {ratios[len(ratios) // 2]:.2f}x as fast as 1 "
            f"(median of {rounds} rounds; near {threads} where they have cores of their own)")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def copy_case(x: torch.Tensor):
    """The table's baseline case for x: a plain copy into an existing tensor, as (case, fn, bytes moved)."""
    y = torch.empty_like(x)
    return f"copy {dtype_name(x.dtype)}", lambda: y.copy_(x), 2 * x.numel() * x.element_size()


# Bytes of each buffer of memory_copy: well past the L3 of the CPUs this runs on (32 MB per Zen 4 CCD).
MEMORY_COPY_BYTES = 256 << 20


def memory_copy():
    """A copy between two buffers of MEMORY_COPY_BYTES, as (fn, bytes moved): memory's speed, the limit of a kernel
    that streams a weight from memory. A copy the size of a small weight is no such limit: its source and
    destination stay in the L3 from one call to the next (8.7 MB, 4096x4096's NF4 bytes, copied at 150 GB/s on 2
    threads of a Zen 4 VM where memory copies at 30-43), while the weights it is set beside are read from memory."""
    src = torch.empty(MEMORY_COPY_BYTES, dtype=torch.uint8).random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src), 2 * MEMORY_COPY_BYTES


def cache_cleaner():
    """A read of MEMORY_COPY_BYTES, to call (untimed, or timed apart) after memory_copy: the copy leaves the caches
    full of its destination's dirty lines, whose write-backs would slow whatever reads memory next."""
    buf = torch.ones(MEMORY_COPY_BYTES // 8, dtype=torch.int64)
    return lambda: buf.sum()


def round_seconds(fns, rounds: int):
    """Seconds of each fn in each of `rounds` rounds, a round calling every fn once in turn, after one untimed
    warm-up call each (page faults, thread-pool start). A shared machine's slow spells, which last seconds, then
    slow the copy and the kernels timed beside it alike. One list per fn."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return times


def print_bandwidth_header(width: int, rounds: int) -> None:
    print(f"ms, GB/s: the fastest of {rounds} rounds; % of copy: the median of each round's ratio to the copy")
    head = f"{'case':<{width}}{'ms':>9}{'GB/s':>9}{'% of copy':>11}"
    print(head)
    print("-" * len(head))


def print_bandwidth_table(cases, rounds: int, width: int) -> None:
    """Times cases of (name, fn, bytes read plus written), the first copy_case's, in rounds (round_seconds), and
    prints a row each: ms and GB/s of its fastest round, and "% of copy", the median over rounds of its throughput
    against the copy's in the same round. Throughput counts the same bytes as the copy's, so the percentages
    compare like with like. Returns each case's seconds per round (round_seconds)."""
    times = round_seconds([fn for _, fn, _ in cases], rounds)
    copy_bytes, copy_times = cases[0][2], times[0]
    for (name, _, nbytes), ts in zip(cases, times):
        ratios = sorted((nbytes / t) / (copy_bytes / c) for t, c in zip(ts, copy_times))
        print(f"{name:<{width}}{min(ts) * 1e3:>9.3f}{nbytes / min(ts) / 1e9:>9.2f}"
              f"{100 * ratios[len(ratios) // 2]:>10.0f}%")
    return times


def median_ratio(times, base_times) -> float:
    """The median over rounds of a case's time against a base case's in the same round."""
    ratios = sorted(t / b for t, b in zip(times, base_times))
    return ratios[len(ratios) // 2]
