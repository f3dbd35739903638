"""GPU benchmark (tools/gpu/check.sh, tools/gpu/build.sh): NF4 quantize/dequantize of 512 MB of bf16 and of fp32 at
blocksizes 64, 256 and 4096, each dtype beside a device-to-device copy in the same run, and gemv_4bit for one token
against bf16 F.linear: 1x8192 times 8192x8192, 1x8192 times 28672x8192 and 1x28672 times 8192x28672 (the weight
N x K), with bitsandbytes side by side where installed.

GPU time: a CUDA graph of back-to-back calls, replayed and timed with CUDA events (launch overhead excluded);
eager time: wall time per synchronized call (launch overhead included). Bandwidth counts bytes read plus written.
The copy's bandwidth is the better of a graph (where torch's copy becomes a copy-engine memcpy node, measured ~20%
slower on the H100) and back-to-back launches timed with events (an SM copy kernel), so that no row is flattered by
a slow baseline. gemv rotates among weight sets larger than the L2 cache together, so that no call finds its weight
in the cache (an 8192x8192 NF4 weight, 36 MB with its absmax, would otherwise stay in the H100's 50 MB L2); its
memory floor is the weight's bytes over the copy's bandwidth. Goals (issue 22): quantize_4bit bs64 >= 85% of copy,
dequantize_4bit >= 90%; gemv 8192x8192 <= 20 us and >= 2.5x F.linear, 28672x8192 >= 2.8x.
"""

import itertools

import torch

import gpu_timing

BYTES = 512 * 1024 * 1024
BLOCKSIZES = (64, 256, 4096)
DTYPES = (torch.bfloat16, torch.float32)
GEMV_SHAPES = ((8192, 8192), (28672, 8192), (8192, 28672))  # (N, K): out features, in features
REPEAT = 50


def graph_us(fn):
    return gpu_timing.graph_us(fn, REPEAT)


def events_us(fn):
    return gpu_timing.events_us(fn, REPEAT)


def eager_us(fn):
    return gpu_timing.eager_us(fn, REPEAT)


def rows_for(dtype, have_bnb):
    n = BYTES // torch.empty((), dtype=dtype).element_size()
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    name = str(dtype)[6:]
    rows = [(f"copy {name} (device to device)", lambda: y.copy_(x), 2 * BYTES)]
    for bs in BLOCKSIZES:
        packed, absmax = torch.ops.bnb.quantize_4bit(x, bs, "nf4", torch.uint8)
        moved = BYTES + n // 2 + absmax.numel() * 4
        rows += [(f"bnb quantize_4bit {name} bs{bs}",
                  lambda bs=bs: torch.ops.bnb.quantize_4bit(x, bs, "nf4", torch.uint8), moved),
                 (f"bnb dequantize_4bit {name} bs{bs}",
                  lambda bs=bs, p=packed, a=absmax: torch.ops.bnb.dequantize_4bit.out(p, a, bs, "nf4", [n], dtype,
                                                                                      out=out), moved)]
        if have_bnb:
            rows += [(f"bitsandbytes quantize_4bit {name} bs{bs}",
                      lambda bs=bs: torch.ops.bitsandbytes.quantize_4bit(x, bs, "nf4", torch.uint8), moved),
                     (f"bitsandbytes dequantize_4bit {name} bs{bs}",
                      lambda bs=bs, p=packed, a=absmax: torch.ops.bitsandbytes.dequantize_4bit(p, a, bs, "nf4", [n],
                                                                                               dtype), moved)]
    return rows


def gemv_row(n_out, k, have_bnb, copy_gbs, l2):
    """One gemv line; its weights are freed on return."""
    from bnb import functional as F
    W = torch.randn(n_out, k, device="cuda", dtype=torch.bfloat16) * 0.02
    Wq, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4")
    a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    weight_bytes = Wq.numel() + 4 * state.absmax.numel()
    copies = -(-2 * l2 // weight_bytes)  # together at least twice the L2 cache
    sets = [(Wq.clone(), state.absmax.clone()) for _ in range(copies)]

    def rotating(gemv_op):
        turn = itertools.cycle(sets)

        def call():
            w, am = next(turn)
            return gemv_op(a, w, [n_out, k], am, state.code, 64)
        return call
    gemv = rotating(torch.ops.bnb.gemv_4bit)
    g, dense = graph_us(gemv), graph_us(lambda: torch.nn.functional.linear(a, W))
    floor = weight_bytes / copy_gbs / 1e3  # us at the copy's bandwidth (read only: no write to speak of)
    line = f"{f'{n_out}x{k}':<28}{g:>11.1f}{floor:>10.1f}{dense:>13.1f}{dense / g:>9.2f}x{eager_us(gemv):>14.1f}"
    if have_bnb:
        line += f"{graph_us(rotating(torch.ops.bitsandbytes.gemv_4bit)):>17.1f}"
    return line


def gemv_rows(have_bnb, copy_gbs):
    head = (f"{'gemv, 1 token, bf16, N x K':<28}{'bnb GPU us':>11}{'floor us':>10}{'F.linear us':>13}"
            f"{'speed-up':>10}{'bnb eager us':>14}" + (f"{'bitsandbytes us':>17}" if have_bnb else ""))
    print(head)
    print("-" * len(head))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for n_out, k in GEMV_SHAPES:
        print(gemv_row(n_out, k, have_bnb, copy_gbs, l2), flush=True)
        torch.cuda.empty_cache()


def main():
    import bnb
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU 4-bit benchmark is skipped")
        return
    try:
        import bitsandbytes  # noqa: F401  (registers torch.ops.bitsandbytes)
        have_bnb = True
    except ImportError:
        have_bnb = False
        print("(bitsandbytes not installed: no side-by-side rows)")
    print(f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}, {BYTES >> 20} MB "
          f"inputs, NF4")
    head = f"{'case':<40}{'GPU us':>10}{'GB/s':>9}{'% of copy':>11}{'eager us':>10}"
    print(head)
    print("-" * len(head))
    bf16_copy_gbs = None
    for dtype in DTYPES:
        copy_gbs = None
        for name, fn, nbytes in rows_for(dtype, have_bnb):
            g = graph_us(fn) if copy_gbs else min(graph_us(fn), events_us(fn))
            gbs = nbytes / g / 1e3
            copy_gbs = copy_gbs or gbs
            print(f"{name:<40}{g:>10.1f}{gbs:>9.0f}{100 * gbs / copy_gbs:>10.0f}%{eager_us(fn):>10.1f}", flush=True)
        bf16_copy_gbs = bf16_copy_gbs or copy_gbs
        torch.cuda.empty_cache()
    print()
    gemv_rows(have_bnb, bf16_copy_gbs)


if __name__ == "__main__":
    main()
