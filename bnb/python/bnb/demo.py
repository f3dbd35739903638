"""The main job: quantize realistic LLM weight shapes on the CPU (8-bit blockwise and 4-bit NF4) and print how
much smaller they get, how much error that costs, and how fast it runs."""

import time

import torch

from . import _C, config, functional
from .info import isa_line

# (name, rows, cols): Llama-7B's attention/MLP projections and its embedding.
SHAPES = [
    ("q_proj 4096x4096", 4096, 4096),
    ("mlp up 4096x11008", 4096, 11008),
    ("mlp down 11008x4096", 11008, 4096),
    ("embed 32000x4096", 32000, 4096),
]


def _best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _formats(blocksize: int):
    """(label, quantize(W) -> (q, state), dequantize(q, state), stored bytes of (q, state))."""
    def bytes_8bit(q, s):
        return q.numel() + s.absmax.numel() * 4

    def bytes_nf4(q, s):
        return q.numel() * q.element_size() + s.absmax.numel() + s.state2.absmax.numel() * 4

    return [
        (f"8-bit bs{blocksize}", lambda W: functional.quantize_blockwise(W, blocksize=blocksize),
         functional.dequantize_blockwise, bytes_8bit),
        ("nf4 bs64 nested", lambda W: functional.quantize_4bit(W, quant_type="nf4", compress_statistics=True),
         functional.dequantize_4bit, bytes_nf4),
    ]


def run_demo(args) -> int:
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    print(f"bnb quantization on the CPU: {args.dtype} weights, instruction set {_C.cpu_isa()}, {_threads()}")
    print(isa_line())
    head = (f"{'tensor':<25}{'format':<17}{'MB before':>10}{'MB after':>10}{'ratio':>7}{'mean abs err':>14}"
            f"{'mean rel err':>14}{'quant GB/s':>12}{'dequant GB/s':>14}")
    print(head)
    print("-" * len(head))
    for name, rows, cols in SHAPES:
        if args.small:
            rows //= 8
        W = (torch.randn(rows, cols) * 0.02).to(dtype)
        before = W.numel() * W.element_size()
        for label, quantize, dequantize, stored in _formats(args.blocksize):
            q, state = quantize(W)
            back = dequantize(q, state)
            after = stored(q, state)
            err = (back.float() - W.float()).abs()
            rel = err / (W.float().abs() + 1e-8)
            tq = _best_time(lambda: quantize(W), args.repeat)
            td = _best_time(lambda: dequantize(q, state), args.repeat)
            # Throughput counts bytes read plus bytes written, as a memory copy would.
            print(f"{name + (' /8' if args.small else ''):<25}{label:<17}{before / 1e6:>10.1f}{after / 1e6:>10.1f}"
                  f"{before / after:>7.2f}{err.mean().item():>14.3e}{rel.mean().item():>14.3e}"
                  f"{(before + after) / tq / 1e9:>12.2f}{(before + after) / td / 1e9:>14.2f}")
    print("mean rel err: the mean of |error| / |weight|; NF4 rounds the weights nearest 0 to 0, an error of 100% each")
    print("GB/s: bytes read plus bytes written per second, best of --repeat runs, each into a new output")
    return 0


def _threads() -> str:
    """The threads the CPU kernels split over: torch's pool, capped by the cpu.threads knob when it is set."""
    pool = torch.get_num_threads()
    knob = config.get("cpu.threads")
    n = pool if knob == 0 else min(knob, pool)
    why = "torch's pool" if knob == 0 else f"cpu.threads = {knob}, torch's pool {pool}"
    return f"{n} thread{'' if n == 1 else 's'} ({why})"
