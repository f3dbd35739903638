"""CPU benchmark: blockwise 8-bit quantize/dequantize throughput beside a plain memory copy, measured in one run.

Throughput counts bytes read plus bytes written, as for the copy, so "% of copy" compares like with like.
Run: tools/bench/run_cpu.sh (or .venv/bin/python tools/bench/cpu_blockwise8.py [--elements N]).
"""

import argparse

import torch

from bnb import functional as F
from timing import (copy_case, dtype_name, machine_line, print_bandwidth_header, print_bandwidth_table,
                    thread_scaling_line)

WIDTH = 36


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--elements", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--blocksize", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=9, help="rounds of timed calls (see timing.round_seconds)")
    args = ap.parse_args(argv)
    n, bs = args.elements, args.blocksize
    code = F.create_dynamic_map()
    print(f"{machine_line()}, {n / 2**20:.0f}M elements, blocksize {bs}")
    print(thread_scaling_line())
    print_bandwidth_header(WIDTH, args.repeat)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(n).to(dtype)
        q, absmax = torch.ops.bnb.quantize_blockwise(x, code, bs)
        out = torch.empty_like(x)
        moved = n * x.element_size() + n + absmax.numel() * 4
        name = dtype_name(dtype)
        # Into existing buffers, as the copy writes into an existing tensor: the kernels' own speed. The plain op
        # also allocates its 64 MB of codes each call, whose first-touch page faults the kernel pays (shown apart).
        print_bandwidth_table([
            copy_case(x),
            (f"quantize_blockwise_into {name}", lambda: torch.ops.bnb.quantize_blockwise_into(x, code, bs, q, absmax),
             moved),
            ("  quantize_blockwise, new output", lambda: torch.ops.bnb.quantize_blockwise(x, code, bs), moved),
            (f"dequantize_blockwise.out {name}",
             lambda: torch.ops.bnb.dequantize_blockwise.out(q, absmax, code, bs, dtype, out=out), moved),
        ], args.repeat, WIDTH)
    print(thread_scaling_line(), "(again, after the tables)")


if __name__ == "__main__":
    main()
