"""CPU benchmark: one optimizer step on a large fp32 parameter - bnb's 8-bit and 32-bit Adam(W) updates beside
torch.optim.AdamW (fused and foreach), bitsandbytes' 8-bit Adam where installed, and a memory copy, in one run.

Throughput counts the bytes a step must read and write (gradient, parameter, states), so "% of copy" says how near
memory speed a step runs: 28 bytes per parameter for 32-bit states (g, p read and written, two float32 states read
and written), 16 for 8-bit ones (two one-byte states read and written; absmax, 1/64 of that, not counted).
Run: tools/bench/run_cpu.sh (or .venv/bin/python tools/bench/cpu_optim.py [--elements N]).
"""

import argparse

import torch

from bnb import functional as F
from timing import machine_line, median_ratio, print_bandwidth_header, print_bandwidth_table

WIDTH = 40
BLOCK = 256  # the 8-bit states' blocks


class BnbAdamW:
    """bnb's update op on one flat parameter, as an AdamW step (the op itself: no Python optimizer around it)."""

    def __init__(self, p, g, eight_bit: bool):
        self.p, self.g, self.eight_bit, self.step = p, g, eight_bit, 0
        n = p.numel()
        if eight_bit:
            self.qmap1, self.qmap2 = F.create_dynamic_map(signed=True), F.create_dynamic_map(signed=False)
            self.s1 = torch.full((n,), 127, dtype=torch.uint8)  # the signed map's 0
            self.s2 = torch.zeros(n, dtype=torch.uint8)
            self.a1, self.a2 = torch.zeros((n + BLOCK - 1) // BLOCK), torch.zeros((n + BLOCK - 1) // BLOCK)
        else:
            self.s1, self.s2 = torch.zeros(n), torch.zeros(n)

    def __call__(self):
        self.step += 1
        if self.eight_bit:
            torch.ops.bnb.optimizer_update_8bit_blockwise(
                "adam", self.g, self.p, self.s1, self.s2, 0.9, 0.999, 0.0, 0.0, 1e-8, self.step, 1e-3, self.qmap1,
                self.qmap2, self.a1, self.a2, 0.01, 1.0)
        else:
            torch.ops.bnb.optimizer_update_32bit(
                "adam", self.g, self.p, self.s1, self.s2, None, 0.0, 0.0, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01,
                self.step, 1e-3, 1.0)


def torch_adamw(p0, g, **kw):
    p = torch.nn.Parameter(p0.clone())
    p.grad = g.clone()
    return torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw).step


def bitsandbytes_adam8bit(p0, g):
    """bitsandbytes' own 8-bit AdamW step on the CPU, or None where it is not installed or has no CPU support."""
    try:
        import bitsandbytes
        p = torch.nn.Parameter(p0.clone())
        p.grad = g.clone()
        step = bitsandbytes.optim.AdamW8bit([p], lr=1e-3, weight_decay=0.01).step
        step()
        return step
    except Exception as e:  # noqa: BLE001 - any failure only drops the row
        print(f"(bitsandbytes AdamW8bit: no row: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--elements", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--repeat", type=int, default=7, help="rounds of timed steps (see timing.round_seconds)")
    ap.add_argument("--no-foreach", action="store_true", help="leave out torch's foreach AdamW (slow)")
    args = ap.parse_args(argv)
    n = args.elements
    gen = torch.Generator().manual_seed(0)
    p0, g = torch.randn(n, generator=gen), torch.randn(n, generator=gen) * 0.01
    print(f"{machine_line()}, one fp32 parameter of {n / 2**20:.0f}M elements, AdamW step")
    print_bandwidth_header(WIDTH, args.repeat)
    state32, state8 = 28 * n, 16 * n
    cases = [
        ("copy float32 (the parameter)", lambda y=torch.empty_like(p0): y.copy_(p0), 8 * n),
        ("torch AdamW fused", torch_adamw(p0, g, fused=True), state32),
    ]
    if not args.no_foreach:
        cases.append(("torch AdamW foreach", torch_adamw(p0, g, foreach=True), state32))
    cases += [
        ("bnb AdamW 32-bit (the update op)", BnbAdamW(p0.clone(), g, eight_bit=False), state32),
        ("bnb AdamW 8-bit (the update op)", BnbAdamW(p0.clone(), g, eight_bit=True), state8),
    ]
    theirs = bitsandbytes_adam8bit(p0, g)
    if theirs is not None:
        cases.append(("bitsandbytes AdamW8bit", theirs, state8))
    times = print_bandwidth_table(cases, args.repeat, WIDTH)
    print("time against torch's fused AdamW (median of rounds' ratios):")
    for (name, _, _), ts in zip(cases[2:], times[2:]):
        print(f"  {name:<{WIDTH}}{median_ratio(ts, times[1]):>6.2f}x")


if __name__ == "__main__":
    main()
