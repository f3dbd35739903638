"""One launch of each of bnb's CUDA kernels at benchmark sizes, for tools/gpu/profile.sh to profile with ncu: 8-bit
quantize and dequantize (256M bf16, blocksize 4096), NF4 quantize and dequantize (256M bf16, blocksize 64) and
gemv_4bit (1 x 8192 times 8192 x 8192 and 28672 x 8192). Kernels compile before their launch (NVRTC launches
nothing), so each op called once is one profiled launch."""

import torch

import bnb
from bnb import functional as F

N = 256 * 1024 * 1024
x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
code = F.create_dynamic_map().cuda()
q, absmax = torch.ops.bnb.quantize_blockwise(x, code, 4096)
torch.ops.bnb.dequantize_blockwise(q, absmax, code, 4096, torch.bfloat16)
del q, absmax
packed, absmax = torch.ops.bnb.quantize_4bit(x, 64, "nf4", torch.uint8)
torch.ops.bnb.dequantize_4bit(packed, absmax, 64, "nf4", [N], torch.bfloat16)
del x, packed, absmax
for n_out, k in ((8192, 8192), (28672, 8192)):
    Wq, state = F.quantize_4bit(torch.randn(n_out, k, device="cuda", dtype=torch.bfloat16), blocksize=64)
    torch.ops.bnb.gemv_4bit(torch.randn(1, k, device="cuda", dtype=torch.bfloat16), Wq, [n_out, k], state.absmax,
                            state.code, 64)
torch.cuda.synchronize()
print("bnb", bnb.__version__, "profiled ops done")
