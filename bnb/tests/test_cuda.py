"""The CUDA path: kernels on torch's current stream, the disk cache across processes. Skipped without a GPU."""

import os
import subprocess
import sys

import pytest
import torch

import bnb
from bnb import functional as F
from helpers import FLOAT_DTYPES, assert_same_bits

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")

CODE = F.create_dynamic_map()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("blocksize", [32, 256, 4096])
def test_cuda_equals_cpu(dtype, blocksize):
    A = (torch.randn(1_000_003) * 5).to(dtype)
    A[77] = float("nan")
    q_cpu, am_cpu = torch.ops.bnb.quantize_blockwise(A, CODE, blocksize)
    q, am = torch.ops.bnb.quantize_blockwise(A.cuda(), CODE.cuda(), blocksize)
    assert_same_bits(q, q_cpu)
    assert_same_bits(am, am_cpu)
    q_out, am_out = torch.empty_like(q), torch.empty_like(am)
    torch.ops.bnb.quantize_blockwise_into(A.cuda(), CODE.cuda(), blocksize, q_out, am_out)
    assert_same_bits(q_out, q_cpu)
    assert_same_bits(am_out, am_cpu)
    out = torch.ops.bnb.dequantize_blockwise(q, am, CODE.cuda(), blocksize, dtype)
    assert_same_bits(out, torch.ops.bnb.dequantize_blockwise(q_cpu, am_cpu, CODE, blocksize, dtype))


def test_launch_orders_with_work_on_a_side_stream():
    big = torch.randn(1 << 26, device="cuda")
    code = CODE.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # big and code are written on the default stream
    with torch.cuda.stream(side):
        big.mul_(0).add_(1)  # queued before the op on the same stream
        q, absmax = torch.ops.bnb.quantize_blockwise(big, code, 4096)
        back = torch.ops.bnb.dequantize_blockwise(q, absmax, code, 4096, torch.float32)
    side.synchronize()
    assert bool((back == 1).all())


def test_second_process_compiles_nothing(tmp_path):
    script = ("import torch, bnb; A = torch.randn(4096, device='cuda'); "
              "code = bnb.functional.create_dynamic_map().cuda(); "
              "q, a = torch.ops.bnb.quantize_blockwise(A, code, 64); "
              "torch.ops.bnb.dequantize_blockwise(q, a, code, 64, torch.float32); torch.cuda.synchronize(); "
              "s = bnb.jit.stats(); print(s['compiles'], s['disk_hits'])")
    env = dict(os.environ, BNB_CACHE_DIR=str(tmp_path / "kernels"))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    # quantize is two kernels (prepare_codebook8, quantize_blockwise8), dequantize one
    assert first.stdout.split() == ["3", "0"]
    assert second.stdout.split() == ["0", "3"]


def test_bad_input_on_cuda():
    with pytest.raises(RuntimeError, match="code is on cpu but A is on cuda"):
        torch.ops.bnb.quantize_blockwise(torch.randn(100, device="cuda"), CODE, 64)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_cuda_quantize_with_a_non_finite_code_gives_nan_absmax(bad):
    # The CPU rejects the codebook; CUDA does not check (it would wait for the device) but poisons absmax instead,
    # and its codes depend on nothing but the inputs.
    code = CODE.clone()
    code[3] = bad
    A = torch.randn(100_003)
    with pytest.raises(RuntimeError, match="every entry must be finite"):
        torch.ops.bnb.quantize_blockwise(A, code, 256)
    runs = [torch.ops.bnb.quantize_blockwise(A.cuda(), code.cuda(), 256) for _ in range(2)]
    assert bool(runs[0][1].isnan().all())
    assert_same_bits(runs[0][0], runs[1][0])
