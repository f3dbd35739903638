"""One launch of each of bnb's CUDA kernels at benchmark sizes, for tools/gpu/profile.sh to profile with ncu. Kernels
compile before their launch (NVRTC launches nothing), so each op called once is one profiled launch.

  python3 tools/gpu/profile_ops.py [OP ...]     (default: all but optim8)

  codec8   8-bit quantize and dequantize, 256M bf16, blocksize 4096
  codec4   NF4 quantize and dequantize, 256M bf16, blocksize 64
  gemv4    gemv_4bit, 1 x 8192 times 8192 x 8192 and 28672 x 8192
  optim8   one 8-bit blockwise AdamW step on 256M fp32 (issue 25's shape), at cuda.optim8_per_thread 8 and 4
"""

import sys

import torch

import bnb
from bnb import functional as F

N = 256 * 1024 * 1024


def codec8():
    x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    code = F.create_dynamic_map().cuda()
    q, absmax = torch.ops.bnb.quantize_blockwise(x, code, 4096)
    torch.ops.bnb.dequantize_blockwise(q, absmax, code, 4096, torch.bfloat16)


def codec4():
    x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    packed, absmax = torch.ops.bnb.quantize_4bit(x, 64, "nf4", torch.uint8)
    torch.ops.bnb.dequantize_4bit(packed, absmax, 64, "nf4", [N], torch.bfloat16)


def gemv4():
    for n_out, k in ((8192, 8192), (28672, 8192)):
        Wq, state = F.quantize_4bit(torch.randn(n_out, k, device="cuda", dtype=torch.bfloat16), blocksize=64)
        torch.ops.bnb.gemv_4bit(torch.randn(1, k, device="cuda", dtype=torch.bfloat16), Wq, [n_out, k], state.absmax,
                                state.code, 64)


def optim8():
    # States a few steps in (random codes, absmax of a trained state's size), as the benchmark's steady state.
    g = torch.randn(N, device="cuda") * 1e-3
    p = torch.randn(N, device="cuda")
    qmap1, qmap2 = F.create_dynamic_map(signed=True).cuda(), F.create_dynamic_map(signed=False).cuda()
    s1 = torch.randint(0, 256, (N,), dtype=torch.uint8, device="cuda")
    s2 = torch.randint(0, 256, (N,), dtype=torch.uint8, device="cuda")
    a1 = torch.full((N // 256,), 1e-3, device="cuda")
    a2 = torch.full((N // 256,), 1e-6, device="cuda")
    for per in (8, 4):
        with bnb.config.override(cuda__optim8_per_thread=per):
            torch.ops.bnb.optimizer_update_8bit_blockwise("adam", g, p, s1, s2, 0.9, 0.999, 0.0, 0.0, 1e-8, 3, 1e-3,
                                                          qmap1, qmap2, a1, a2, 0.01, 1.0)


OPS = {"codec8": codec8, "codec4": codec4, "gemv4": gemv4, "optim8": optim8}
for name in sys.argv[1:] or ["codec8", "codec4", "gemv4"]:
    if name not in OPS:
        sys.exit(f"profile_ops: unknown op {name!r}; choose from {sorted(OPS)}")
    OPS[name]()
    torch.cuda.synchronize()
print("bnb", bnb.__version__, "profiled ops done")
