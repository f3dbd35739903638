"""CPU benchmark for LLM.int8(): the int8 product (int8_linear_matmul) beside torch._int_mm, and Linear8bitLt's
forward at thresholds 0 and 6.0 beside F.linear in bfloat16 and float32, all measured in one run.

TOP/s counts 2 * M * N * K operations. The weight-read limit is the time to read the N x K int8 weight once at the
speed of a memory copy (timing.memory_copy: its bytes read plus written per second): no layer that reads its weight
from memory can beat it. The Linear8bitLt input is randn with four outlier columns (x 8, so |x| >= 6 in most rows),
as LLM activations have; threshold 0 quantizes them with the rest.
Run: tools/bench/run_cpu.sh, or .venv/bin/python tools/bench/cpu_int8.py.
"""

import argparse

import torch

import bnb
from timing import cache_cleaner, machine_line, memory_copy, round_seconds, thread_scaling_line

OUTLIER_COLUMNS = (10, 400, 2000, 3000)


def best_and_ratio(times, base):
    """The fastest of a case's rounds, and the median over rounds of base's time over the case's (x faster)."""
    ratios = sorted(b / t for t, b in zip(times, base))
    return min(times), ratios[len(ratios) // 2]


def product_table(N, K, batches, rounds):
    g = torch.Generator().manual_seed(0)
    B = torch.randint(-128, 128, (N, K), dtype=torch.int8, generator=g)
    head = (f"{'int8 product, ' + str(N) + 'x' + str(K) + ' weight':<32}{'bnb us':>10}{'TOP/s':>8}"
            f"{'_int_mm us':>12}{'TOP/s':>8}{'x _int_mm':>11}")
    print(head)
    print("-" * len(head))
    for M in batches:
        A = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
        out = torch.empty(M, N, dtype=torch.int32)
        ours, theirs = round_seconds([lambda: torch.ops.bnb.int8_linear_matmul.out(A, B, out=out),
                                      lambda: torch._int_mm(A, B.t())], rounds)
        if not torch.equal(out, torch._int_mm(A, B.t())):
            raise AssertionError(f"int8_linear_matmul differs from the exact product at M={M}")
        t, x = best_and_ratio(ours, theirs)
        ops = 2 * M * N * K
        print(f"{'M=' + str(M):<32}{t * 1e6:>10.0f}{ops / t / 1e12:>8.3f}{min(theirs) * 1e6:>12.0f}"
              f"{ops / min(theirs) / 1e12:>8.3f}{x:>10.2f}x")


def linear_table(N, K, batches, rounds):
    torch.manual_seed(0)
    lin16 = torch.nn.Linear(K, N).to(torch.bfloat16)
    lin32 = torch.nn.Linear(K, N)
    lin32.load_state_dict(lin16.state_dict())
    layers = {}
    for threshold in (0.0, 6.0):
        layer = bnb.nn.Linear8bitLt(K, N, has_fp16_weights=False, threshold=threshold)
        layer.load_state_dict(lin16.state_dict())
        layers[threshold] = layer.to("cpu")  # quantizes the bfloat16 weight
    codes = layers[0.0].weight.data
    copy, moved = memory_copy()
    clean = cache_cleaner()  # after the copy, so the next round's first layer does not pay its dirty lines
    head = (f"{'Linear8bitLt forward, ' + str(N) + 'x' + str(K):<32}{'thr 0 us':>10}{'thr 6 us':>10}"
            f"{'bf16 F.linear':>15}{'fp32 F.linear':>15}{'weight read':>13}")
    print(head)
    print("-" * len(head))
    cols = [c for c in OUTLIER_COLUMNS if c < K]
    for M in batches:
        x = torch.randn(M, K, dtype=torch.bfloat16)
        x[:, cols] *= 8
        x32 = x.float()
        with torch.inference_mode():
            times = round_seconds([lambda: layers[0.0](x), lambda: layers[6.0](x), lambda: lin16(x),
                                   lambda: lin32(x32), copy, clean], rounds)
        t0, t6, t16, t32, tc, _ = (min(t) * 1e6 for t in times)
        read = tc * codes.numel() / moved
        print(f"{'batch ' + str(M):<32}{t0:>10.0f}{t6:>10.0f}{t16:>15.0f}{t32:>15.0f}{read:>13.0f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="4096x4096", help="the weight, NxK")
    ap.add_argument("--batches", default="1,16,512", help="rows M of the int8 product table")
    ap.add_argument("--linear-batches", default="1,16,128", help="batches of the Linear8bitLt table")
    ap.add_argument("--repeat", type=int, default=9, help="rounds of timed calls (see timing.round_seconds)")
    ap.add_argument("--elements", type=int, help="ignored (tools/bench/run_cpu.sh passes it to every benchmark)")
    args = ap.parse_args(argv)
    N, K = (int(d) for d in args.shape.split("x"))
    print(f"{machine_line()}, int8 product kernel {bnb._C.int8_gemm_kernel()}")
    print(thread_scaling_line())
    product_table(N, K, [int(m) for m in args.batches.split(",")], args.repeat)
    print()
    linear_table(N, K, [int(m) for m in args.linear_batches.split(",")], args.repeat)
    print(thread_scaling_line(), "(again, after the tables)")


if __name__ == "__main__":
    main()
