"""GPU benchmark (run by tools/gpu/build.sh): NF4 quantize/dequantize on 256M bf16 elements beside a device-to-device
copy in the same run, and gemv_4bit for one token against bf16 F.linear (8192x8192 and 28672x8192), with
bitsandbytes side by side where installed.

GPU time: a CUDA graph of back-to-back calls, replayed and timed with CUDA events (launch overhead excluded);
eager time: wall time per synchronized call (launch overhead included). Bandwidth counts bytes read plus written.
The copy's bandwidth is the better of a graph (where torch's copy becomes a copy-engine memcpy node, measured ~20%
slower on the H100) and back-to-back launches timed with events (an SM copy kernel), so that no row is flattered by
a slow baseline. gemv rotates among weight sets larger than the L2 cache together, so that no call finds its weight
in the cache (an 8192x8192 NF4 weight, 36 MB with its absmax, would otherwise stay in the H100's 50 MB L2).
"""

import itertools

import torch

import gpu_timing

N = 256 * 1024 * 1024
REPEAT = 50


def graph_us(fn):
    return gpu_timing.graph_us(fn, REPEAT)


def events_us(fn):
    return gpu_timing.events_us(fn, REPEAT)


def eager_us(fn):
    return gpu_timing.eager_us(fn, REPEAT)


def main():
    import bnb
    from bnb import functional as F
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU 4-bit benchmark is skipped")
        return
    try:
        import bitsandbytes  # noqa: F401
        have_bnb = True
    except ImportError:
        have_bnb = False
        print("(bitsandbytes not installed: no side-by-side rows)")
    print(f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")

    x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    packed, absmax = torch.ops.bnb.quantize_4bit(x, 64, "nf4", torch.uint8)
    out = torch.empty_like(x)
    moved = 2 * N + N // 2 + absmax.numel() * 4
    rows = [("copy bf16 (device to device)", lambda: y.copy_(x), 4 * N),
            ("bnb quantize_4bit nf4 bs64", lambda: torch.ops.bnb.quantize_4bit(x, 64, "nf4", torch.uint8), moved),
            ("bnb dequantize_4bit nf4 bs64",
             lambda: torch.ops.bnb.dequantize_4bit.out(packed, absmax, 64, "nf4", [N], torch.bfloat16, out=out), moved)]
    if have_bnb:
        rows += [("bitsandbytes quantize_4bit",
                  lambda: torch.ops.bitsandbytes.quantize_4bit(x, 64, "nf4", torch.uint8), moved),
                 ("bitsandbytes dequantize_4bit",
                  lambda: torch.ops.bitsandbytes.dequantize_4bit(packed, absmax, 64, "nf4", [N], torch.bfloat16),
                  moved)]
    head = f"{'case':<34}{'GPU us':>10}{'GB/s':>9}{'% of copy':>11}{'eager us':>10}"
    print(head)
    print("-" * len(head))
    copy_gbs = None
    for name, fn, nbytes in rows:
        g = graph_us(fn) if copy_gbs else min(graph_us(fn), events_us(fn))
        gbs = nbytes / g / 1e3
        copy_gbs = copy_gbs or gbs
        print(f"{name:<34}{g:>10.1f}{gbs:>9.0f}{100 * gbs / copy_gbs:>10.0f}%{eager_us(fn):>10.1f}")
    del x, y, out

    print()
    head = f"{'gemv, 1 token, bf16':<26}{'bnb GPU us':>12}{'F.linear us':>13}{'speed-up':>10}{'bnb eager us':>14}" + \
           (f"{'bitsandbytes us':>17}" if have_bnb else "")
    print(head)
    print("-" * len(head))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for n_out, k in ((8192, 8192), (28672, 8192)):
        W = torch.randn(n_out, k, device="cuda", dtype=torch.bfloat16) * 0.02
        Wq, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4")
        a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        copies = -(-2 * l2 // (Wq.numel() + 4 * state.absmax.numel()))  # together at least twice the L2 cache
        sets = [(Wq.clone(), state.absmax.clone()) for _ in range(copies)]

        def rotating(gemv_op):
            turn = itertools.cycle(sets)

            def call():
                w, am = next(turn)
                return gemv_op(a, w, [n_out, k], am, state.code, 64)
            return call
        gemv = rotating(torch.ops.bnb.gemv_4bit)
        g, dense = graph_us(gemv), graph_us(lambda: torch.nn.functional.linear(a, W))
        line = f"{f'{n_out}x{k}':<26}{g:>12.1f}{dense:>13.1f}{dense / g:>9.2f}x{eager_us(gemv):>14.1f}"
        if have_bnb:
            line += f"{graph_us(rotating(torch.ops.bitsandbytes.gemv_4bit)):>17.1f}"
        del sets
        print(line)


if __name__ == "__main__":
    main()
