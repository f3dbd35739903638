"""CPU benchmark for 4-bit NF4: quantize/dequantize throughput beside a memory copy, and gemv_4bit beside
F.linear with float32 and bfloat16 weights, all measured in one run.

Throughput counts bytes read plus bytes written. gemv times are per call for one token (1 x K input).
The latency table times every call of the allocating dequantize_4bit (a new output each call, as users call it),
first call included, with the output cache (the default) and without it, huge pages on and off: first, p50, p99
and worst, not only the best.
Run: tools/bench/run_cpu.sh, or .venv/bin/python tools/bench/cpu_blockwise4.py.
"""

import argparse

import torch

from bnb import functional as F
import bnb
from timing import (best_seconds, call_seconds, copy_case, dtype_name, machine_line, percentile,
                    print_bandwidth_header, print_bandwidth_table, thread_scaling_line, weight_shapes)

WIDTH = 40


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--elements", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--repeat", type=int, default=5, help="rounds of timed calls (see timing.round_seconds)")
    ap.add_argument("--gemv", type=weight_shapes, default="4096x4096,11008x4096",
                    help="weight shapes NxK of the gemv table (empty: no table)")
    ap.add_argument("--calls", type=int, default=40, help="timed calls per row of the latency table")
    args = ap.parse_args(argv)
    n = args.elements
    print(f"{machine_line()}, NF4 blocksize 64")
    print(thread_scaling_line())
    print_bandwidth_header(WIDTH, args.repeat)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(n).to(dtype)
        packed, absmax = torch.ops.bnb.quantize_4bit(x, 64, "nf4", torch.uint8)
        out = torch.empty_like(x)
        moved = n * x.element_size() + n // 2 + absmax.numel() * 4
        name = dtype_name(dtype)
        print_bandwidth_table([
            copy_case(x),
            # Into existing buffers, as the copy writes into an existing tensor: the kernel's own speed. The plain op
            # also allocates its outputs each call, whose first-touch page faults it pays (shown apart).
            (f"quantize_4bit_into {name}",
             lambda: torch.ops.bnb.quantize_4bit_into(x, 64, "nf4", packed, absmax), moved),
            ("  quantize_4bit, new output", lambda: torch.ops.bnb.quantize_4bit(x, 64, "nf4", torch.uint8), moved),
            (f"dequantize_4bit {name}",
             lambda: torch.ops.bnb.dequantize_4bit.out(packed, absmax, 64, "nf4", [n], dtype, out=out), moved),
        ], args.repeat, WIDTH)
    print(thread_scaling_line(), "(again, after the tables)")

    print()
    latency_table(n, args.calls)
    if args.gemv:
        gemv_table(args.gemv, args.repeat)


def gemv_table(shapes, repeat: int) -> None:
    print()
    head = f"{'gemv, one token':<28}{'gemv_4bit us':>14}{'F.linear fp32 us':>18}{'F.linear bf16 us':>18}"
    print(head)
    print("-" * len(head))
    for N, K in shapes:
        W = torch.randn(N, K) * 0.02
        for dtype in (torch.float32, torch.bfloat16):
            packed, state = F.quantize_4bit(W.to(dtype), blocksize=64, quant_type="nf4", compress_statistics=True)
            a = torch.randn(1, K).to(dtype)
            absmax = F._absmax_of(state)
            t_g = best_seconds(lambda: torch.ops.bnb.gemv_4bit(a, packed, [N, K], absmax, state.code, 64),
                               repeat * 4)
            w32, w16 = W, W.bfloat16()
            a32, a16 = a.float(), a.bfloat16()
            t_32 = best_seconds(lambda: torch.nn.functional.linear(a32, w32), repeat * 4)
            t_16 = best_seconds(lambda: torch.nn.functional.linear(a16, w16), repeat * 4)
            name = f"{N}x{K} {dtype_name(dtype)} A"
            print(f"{name:<28}{t_g * 1e6:>14.0f}{t_32 * 1e6:>18.0f}{t_16 * 1e6:>18.0f}")


# The latency table's settings: the default (freed outputs reused from the output cache), and without the cache,
# fresh memory each call, advised as huge pages or not.
LATENCY_SETTINGS = [
    ("output cache", {}),
    ("no cache, huge pages", {"cpu__output_cache_mb": 0, "cpu__huge_pages": True}),
    ("no cache, 4 KB pages", {"cpu__output_cache_mb": 0, "cpu__huge_pages": False}),
]
LATENCY_RUN = 5  # calls of one setting in a row: the cache keeps its block only while its setting runs


def latency_table(n: int, calls: int) -> None:
    """Allocating dequantize_4bit, every call timed, under each of LATENCY_SETTINGS. The settings take turns in runs
    of LATENCY_RUN calls, so a slow stretch of the machine falls on all alike; "first" is a setting's first call."""
    head = (f"{'dequantize_4bit, new output, ' + str(calls) + ' calls':<40}{'first ms':>10}{'p50 ms':>10}"
            f"{'p99 ms':>10}{'worst ms':>10}")
    print(head)
    print("-" * len(head))
    for dtype in (torch.float32, torch.bfloat16):
        packed, absmax = torch.ops.bnb.quantize_4bit(torch.randn(n).to(dtype), 64, "nf4", torch.uint8)
        times = {name: [] for name, _ in LATENCY_SETTINGS}
        while len(times[LATENCY_SETTINGS[0][0]]) < calls:
            for name, knobs in LATENCY_SETTINGS:
                with bnb.config.override(**knobs):
                    for _ in range(min(LATENCY_RUN, calls - len(times[name]))):
                        times[name] += call_seconds(
                            lambda: torch.ops.bnb.dequantize_4bit(packed, absmax, 64, "nf4", [n], dtype), 1)
        for name, _ in LATENCY_SETTINGS:
            t = [s * 1e3 for s in times[name]]
            row = f"{dtype_name(dtype)}, {name}"
            print(f"{row:<40}{t[0]:>10.3f}{percentile(t, 0.5):>10.3f}{percentile(t, 0.99):>10.3f}{max(t):>10.3f}")


if __name__ == "__main__":
    main()
