"""GPU benchmark (tools/gpu/check.sh, tools/gpu/build.sh): blockwise 8-bit quantize/dequantize of 512 MB of bf16 and
of fp32 (256M and 128M elements) at blocksizes 64, 256 and 4096, each dtype beside a device-to-device copy of the
same tensor measured in the same run, bitsandbytes side by side where installed. The JIT's costs: gpu_jit.py.

GPU time is CUDA-event time over back-to-back launches; eager time is wall time per call, synchronized.
Bandwidth counts bytes read plus bytes written, as for the copy. Goals (issue 22): quantize >= 85% of copy,
dequantize >= 90%.
"""

import torch

import gpu_timing

BYTES = 512 * 1024 * 1024  # input size per dtype: far beyond the L2 cache
BLOCKSIZES = (64, 256, 4096)
DTYPES = (torch.bfloat16, torch.float32)
REPEAT = 20


def gpu_ms(fn):
    return gpu_timing.events_us(fn, REPEAT) / 1e3


def eager_ms(fn):
    return gpu_timing.eager_us(fn, REPEAT) / 1e3


def rows_for(dtype, code, have_bnb):
    """(name, fn, bytes moved) for one dtype: its copy first, then each blocksize's ops."""
    n = BYTES // torch.empty((), dtype=dtype).element_size()
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    name = str(dtype)[6:]
    rows = [(f"copy {name} (device to device)", lambda: y.copy_(x), 2 * BYTES)]
    for bs in BLOCKSIZES:
        q, absmax = torch.ops.bnb.quantize_blockwise(x, code, bs)
        moved = BYTES + n + absmax.numel() * 4
        rows += [(f"bnb quantize {name} bs{bs}",
                  lambda bs=bs, q=q, absmax=absmax: torch.ops.bnb.quantize_blockwise_into(x, code, bs, q, absmax),
                  moved),
                 (f"bnb dequantize {name} bs{bs}",
                  lambda bs=bs, q=q, absmax=absmax: torch.ops.bnb.dequantize_blockwise.out(q, absmax, code, bs, dtype,
                                                                                        out=out), moved)]
        if have_bnb:
            rows += [(f"bitsandbytes quantize {name} bs{bs}",
                      lambda bs=bs: torch.ops.bitsandbytes.quantize_blockwise(x, code, bs), moved),
                     (f"bitsandbytes dequantize {name} bs{bs}",
                      lambda bs=bs, q=q, absmax=absmax: torch.ops.bitsandbytes.dequantize_blockwise(q, absmax, code,
                                                                                                    bs, dtype), moved)]
    return rows


def main():
    import bnb
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU 8-bit benchmark is skipped")
        return
    try:
        import bitsandbytes  # noqa: F401  (registers torch.ops.bitsandbytes)
        have_bnb = True
    except ImportError:
        have_bnb = False
        print("(bitsandbytes not installed: no side-by-side rows)")
    print(f"bnb {bnb.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}, {BYTES >> 20} MB "
          f"inputs, cuda.threads_per_block {bnb.config.get('cuda.threads_per_block') or 'default'}")
    code = bnb.functional.create_dynamic_map().cuda()
    head = f"{'case':<38}{'GPU ms':>9}{'GB/s':>9}{'% of copy':>11}{'eager ms':>10}"
    print(head)
    print("-" * len(head))
    for dtype in DTYPES:
        copy_gbs = None
        for name, fn, nbytes in rows_for(dtype, code, have_bnb):
            g = gpu_ms(fn)
            gbs = nbytes / g / 1e6
            copy_gbs = copy_gbs or gbs
            print(f"{name:<38}{g:>9.3f}{gbs:>9.0f}{100 * gbs / copy_gbs:>10.0f}%{eager_ms(fn):>10.3f}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
