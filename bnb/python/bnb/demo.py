"""The main job for now: 8-bit blockwise quantization of realistic LLM weight shapes on the CPU, as a table."""

import time

import torch

from . import _C, functional

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


def run_demo(args) -> int:
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    print(f"bnb 8-bit blockwise quantization on the CPU: blocksize {args.blocksize}, {args.dtype} weights, "
          f"instruction set {_C.cpu_isa()} (available: {', '.join(_C.cpu_isas())}), "
          f"{torch.get_num_threads()} threads")
    head = (f"{'tensor':<22}{'MB before':>10}{'MB after':>10}{'ratio':>7}{'mean abs err':>14}{'mean rel err':>14}"
            f"{'quant GB/s':>12}{'dequant GB/s':>14}")
    print(head)
    print("-" * len(head))
    for name, rows, cols in SHAPES:
        if args.small:
            rows //= 8
        W = (torch.randn(rows, cols) * 0.02).to(dtype)
        q, state = functional.quantize_blockwise(W, blocksize=args.blocksize)
        back = functional.dequantize_blockwise(q, state)
        before = W.numel() * W.element_size()
        after = q.numel() + state.absmax.numel() * 4
        err = (back.float() - W.float()).abs()
        rel = err / W.float().abs().clamp_min(1e-8)
        tq = _best_time(lambda: functional.quantize_blockwise(W, blocksize=args.blocksize), args.repeat)
        td = _best_time(lambda: functional.dequantize_blockwise(q, state), args.repeat)
        # Throughput counts bytes read plus bytes written, as a memory copy would.
        print(f"{name + (' /8' if args.small else ''):<22}{before / 1e6:>10.1f}{after / 1e6:>10.1f}"
              f"{before / after:>7.2f}{err.mean().item():>14.3e}{rel[W != 0].mean().item():>14.3e}"
              f"{(before + after) / tq / 1e9:>12.2f}{(before + after) / td / 1e9:>14.2f}")
    return 0
