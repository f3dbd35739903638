"""CPU benchmark: blockwise 8-bit quantize/dequantize throughput beside a plain memory copy, measured in one run.

Throughput counts bytes read plus bytes written, as for the copy, so "% of copy" compares like with like.
Run: tools/bench/run_cpu.sh (or .venv/bin/python tools/bench/cpu_blockwise8.py [--elements N]).
"""

import argparse

import torch

import bnb
from bnb import functional as F
from timing import best_seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--elements", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--blocksize", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n, bs = args.elements, args.blocksize
    code = F.create_dynamic_map()
    print(f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"ISA {bnb._C.cpu_isa()}, {n / 2**20:.0f}M elements, blocksize {bs}")
    head = f"{'case':<36}{'ms':>9}{'GB/s':>9}{'% of copy':>11}"
    print(head)
    print("-" * len(head))
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(n).to(dtype)
        y = torch.empty_like(x)
        esz = x.element_size()
        t_copy = best_seconds(lambda: y.copy_(x), args.repeat)
        copy_gbs = 2 * n * esz / t_copy / 1e9
        q, absmax = torch.ops.bnb.quantize_blockwise(x, code, bs)
        out = torch.empty_like(x)
        # Into existing buffers, as the copy writes into y: the kernels' own speed. The plain op also allocates
        # its 64 MB of codes each call, whose first-touch page faults the kernel pays (shown apart).
        t_q = best_seconds(lambda: torch.ops.bnb.quantize_blockwise.out(x, code, bs, q, absmax), args.repeat)
        t_q_fresh = best_seconds(lambda: torch.ops.bnb.quantize_blockwise(x, code, bs), args.repeat)
        t_d = best_seconds(lambda: torch.ops.bnb.dequantize_blockwise.out(q, absmax, code, bs, dtype, out=out),
                           args.repeat)
        moved = n * esz + n + absmax.numel() * 4
        name = str(dtype).removeprefix("torch.")
        for case, t, nbytes in ((f"copy {name}", t_copy, 2 * n * esz),
                                (f"quantize_blockwise.out {name}", t_q, moved),
                                (f"  quantize_blockwise, new output", t_q_fresh, moved),
                                (f"dequantize_blockwise.out {name}", t_d, moved)):
            gbs = nbytes / t / 1e9
            print(f"{case:<36}{t * 1e3:>9.2f}{gbs:>9.2f}{100 * gbs / copy_gbs:>10.0f}%")


if __name__ == "__main__":
    main()
