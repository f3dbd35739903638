"""GPU benchmark (run by tools/gpu/build.sh): blockwise 8-bit quantize/dequantize on 256M bf16 elements beside a
device-to-device copy measured in the same run, bitsandbytes side by side where installed, and the JIT's costs:
first-use compile time per kernel and disk-hit load time, each in a fresh process.

GPU time is CUDA-event time over back-to-back launches; eager time is wall time per call, synchronized.
Bandwidth counts bytes read plus bytes written, as for the copy.
"""

import json
import os
import subprocess
import sys
import tempfile

import torch

import gpu_timing

N = 256 * 1024 * 1024
BLOCKSIZE = 4096
REPEAT = 20


def gpu_ms(fn):
    return gpu_timing.events_us(fn, REPEAT) / 1e3


def eager_ms(fn):
    return gpu_timing.eager_us(fn, REPEAT) / 1e3


def jit_costs():
    """Compile time (empty cache) and disk-hit load time (second process), per kernel, in fresh processes."""
    probe = ("import torch, bnb, json; x = torch.randn(1 << 20, device='cuda', dtype=torch.bfloat16); "
             "code = bnb.functional.create_dynamic_map().cuda(); "
             f"q, a = torch.ops.bnb.quantize_blockwise(x, code, {BLOCKSIZE}); "
             f"torch.ops.bnb.dequantize_blockwise(q, a, code, {BLOCKSIZE}, torch.bfloat16); "
             "torch.cuda.synchronize(); print(json.dumps(bnb.jit.stats()))")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, BNB_CACHE_DIR=cache)
        runs = [json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                          check=True).stdout.splitlines()[-1]) for _ in range(2)]
    first, second = runs
    return first["compile_ms"] / max(first["compiles"], 1), second["disk_load_ms"] / max(second["disk_hits"], 1), \
        first, second


def main():
    import bnb
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU 8-bit benchmark is skipped")
        return
    dev = torch.cuda.get_device_name()
    print(f"bnb {bnb.__version__}, torch {torch.__version__}, {dev}, {N // 2**20}M bf16 elements, "
          f"blocksize {BLOCKSIZE}")
    x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    code = bnb.functional.create_dynamic_map().cuda()
    q, absmax = torch.ops.bnb.quantize_blockwise(x, code, BLOCKSIZE)
    out = torch.empty_like(x)
    moved = N * 2 + N + absmax.numel() * 4
    cases = [("copy bf16 (device to device)", lambda: y.copy_(x), 4 * N),
             ("bnb quantize_blockwise", lambda: torch.ops.bnb.quantize_blockwise(x, code, BLOCKSIZE), moved),
             ("bnb dequantize_blockwise",
              lambda: torch.ops.bnb.dequantize_blockwise.out(q, absmax, code, BLOCKSIZE, torch.bfloat16, out=out),
              moved)]
    try:
        import bitsandbytes  # noqa: F401
        cases += [("bitsandbytes quantize_blockwise",
                   lambda: torch.ops.bitsandbytes.quantize_blockwise(x, code, BLOCKSIZE), moved),
                  ("bitsandbytes dequantize_blockwise",
                   lambda: torch.ops.bitsandbytes.dequantize_blockwise(q, absmax, code, BLOCKSIZE, torch.bfloat16),
                   moved)]
    except ImportError:
        print("(bitsandbytes not installed: no side-by-side rows)")
    head = f"{'case':<36}{'GPU ms':>9}{'GB/s':>9}{'% of copy':>11}{'eager ms':>10}"
    print(head)
    print("-" * len(head))
    copy_gbs = None
    for name, fn, nbytes in cases:
        g = gpu_ms(fn)
        gbs = nbytes / g / 1e6
        copy_gbs = copy_gbs or gbs
        print(f"{name:<36}{g:>9.3f}{gbs:>9.0f}{100 * gbs / copy_gbs:>10.0f}%{eager_ms(fn):>10.3f}")
    compile_ms, load_ms, first, second = jit_costs()
    print(f"JIT: first use compiles {first['compiles']} kernels, {compile_ms:.0f} ms each (goal <= 150); "
          f"a second process loads {second['disk_hits']} from disk, {load_ms:.2f} ms each (goal <= 1), "
          f"compiles {second['compiles']}")


if __name__ == "__main__":
    main()
