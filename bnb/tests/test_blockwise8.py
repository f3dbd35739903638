"""Blockwise 8-bit ops: C++ kernels equal the pure-torch reference bit for bit; error bounds; special values."""

import pytest
import torch

import bnb
from bnb import functional as F
from bnb.reference import blockwise8 as ref
from helpers import (BLOCKSIZES, FLOAT_DTYPES, assert_same_bits, devices, exactly_nearest_codes, sample,
                     values_around_midpoints)

CODE = F.create_dynamic_map()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_kernel_equals_reference(device, dtype, blocksize):
    for n in (1, 31, 3 * blocksize + 17, 70001):
        A = sample(n, dtype, seed=n + blocksize, specials=True).to(device)
        q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE.to(device), blocksize)
        q_ref, absmax_ref = ref.quantize_blockwise(A.cpu(), CODE, blocksize)
        assert_same_bits(q, q_ref)
        assert_same_bits(absmax, absmax_ref)
        out = torch.ops.bnb.dequantize_blockwise(q, absmax, CODE.to(device), blocksize, dtype)
        assert_same_bits(out, ref.dequantize_blockwise(q_ref, absmax_ref, CODE, blocksize, dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("blocksize", [16384, 1 << 17])
def test_cpu_takes_blocks_larger_than_4096_as_bitsandbytes_cpu_does(dtype, blocksize):
    A = sample(2 * blocksize + 999, dtype, seed=blocksize, specials=True)
    q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE, blocksize)
    q_ref, absmax_ref = ref.quantize_blockwise(A, CODE, blocksize)
    assert absmax.numel() == 3
    assert_same_bits(q, q_ref)
    assert_same_bits(absmax, absmax_ref)
    out = F.dequantize_blockwise(*F.quantize_blockwise(A, blocksize=blocksize))
    assert_same_bits(out, ref.dequantize_blockwise(q_ref, absmax_ref, CODE, blocksize, dtype))
    with pytest.raises(RuntimeError, match=r"blocksize must be a power of two in \[32, 1073741824\], got 12288"):
        torch.ops.bnb.quantize_blockwise(A, CODE, 12288)


@pytest.mark.parametrize("isa", bnb._C.cpu_isas())
def test_every_instruction_set_agrees(isa):
    A = sample(50000, torch.bfloat16, seed=3, specials=True)
    want = ref.quantize_blockwise(A, CODE, 256)
    with bnb.config.override(cpu__isa=isa):
        assert bnb._C.cpu_isa() == isa
        got = torch.ops.bnb.quantize_blockwise(A, CODE, 256)
        back = torch.ops.bnb.dequantize_blockwise(got[0], got[1], CODE, 256, torch.float16)
    assert_same_bits(got[0], want[0])
    assert_same_bits(got[1], want[1])
    assert_same_bits(back, ref.dequantize_blockwise(want[0], want[1], CODE, 256, torch.float16))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_count_does_not_change_results(threads):
    A = sample(1 << 20, torch.float32, seed=5)
    want = torch.ops.bnb.quantize_blockwise(A, CODE, 64)
    with bnb.config.override(cpu__threads=threads, cpu__grain_elements=1024):
        got = torch.ops.bnb.quantize_blockwise(A, CODE, 64)
    assert_same_bits(got[0], want[0])
    assert_same_bits(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16: coded by table (bf16_codes.h)
def test_any_codebook_and_unsorted_codebooks(dtype):
    g = torch.Generator().manual_seed(1)
    code = torch.rand(256, generator=g) * 2 - 1  # unsorted, arbitrary values
    code[10] = code[200]  # a duplicate: the lower code wins
    A = torch.randn(4096, generator=g).to(dtype)
    q, absmax = torch.ops.bnb.quantize_blockwise(A, code, 128)
    q_ref, absmax_ref = ref.quantize_blockwise(A, code, 128)
    assert_same_bits(q, q_ref)
    assert not (q == 200).any()
    # Nearest value: no other entry is strictly closer to any scaled input.
    v = (A.float().view(-1, 128) / absmax[:, None]).reshape(-1)
    dist_chosen = (v - code[q.long()]).abs()
    dist_best = (v[:, None] - code[None, :]).abs().min(dim=1).values
    assert torch.all(dist_chosen <= dist_best + 1e-7)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_error_bounds_randn(device, blocksize):
    # bitsandbytes' own bounds for randn 1024x1024 with the dynamic map.
    A = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(blocksize)).to(device)
    q, state = F.quantize_blockwise(A, blocksize=blocksize)
    back = F.dequantize_blockwise(q, state)
    diff = (back - A).abs()
    assert diff.mean().item() < 0.011
    assert (diff / (A.abs() + 1e-8)).mean().item() < 0.018


def test_special_value_policy():
    x = torch.full((96,), 0.5)
    x[:32] = 0
    x[40] = float("nan")
    x[70], x[71] = float("inf"), float("-inf")
    q, absmax = torch.ops.bnb.quantize_blockwise(x, CODE, 32)
    out = torch.ops.bnb.dequantize_blockwise(q, absmax, CODE, 32, torch.float32)
    assert absmax[0] == 0 and torch.isnan(absmax[1]) and torch.isinf(absmax[2])
    assert (out[:32] == 0).all()
    assert torch.isnan(out[32:64]).all()  # NaN is never hidden
    assert out[70] == float("inf") and out[71] == float("-inf")
    assert not torch.isfinite(out[64:96]).any()


def test_non_contiguous_inputs_give_correct_results():
    A = torch.randn(64, 256).t()  # shape (256, 64), a transposed view
    assert not A.is_contiguous()
    q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE, 64)
    q_ref, absmax_ref = ref.quantize_blockwise(A.contiguous(), CODE, 64)
    assert_same_bits(q, q_ref)
    assert_same_bits(absmax, absmax_ref)

    q_strided = q.t().contiguous().t()  # same values, non-contiguous
    want = ref.dequantize_blockwise(q_ref, absmax_ref, CODE, 64, torch.float32)
    assert_same_bits(torch.ops.bnb.dequantize_blockwise(q_strided, absmax, CODE, 64, torch.float32), want)
    out = torch.empty(64, 256).t()  # a non-contiguous out= of the right shape
    torch.ops.bnb.dequantize_blockwise.out(q, absmax, CODE, 64, torch.float32, out=out)
    assert_same_bits(out.contiguous(), want)


def test_out_overload_writes_in_place():
    A = torch.randn(5000, dtype=torch.bfloat16)
    q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE, 256)
    out = torch.empty(5000, dtype=torch.bfloat16)
    ptr = out.data_ptr()
    torch.ops.bnb.dequantize_blockwise.out(q, absmax, CODE, 256, torch.bfloat16, out=out)
    assert out.data_ptr() == ptr
    assert_same_bits(out, ref.dequantize_blockwise(q, absmax, CODE, 256, torch.bfloat16))


def test_quantize_out_overload_writes_in_place():
    A = torch.randn(40, 125, dtype=torch.float16)
    q_ref, absmax_ref = ref.quantize_blockwise(A, CODE, 128)
    out, absmax = torch.empty(40, 125, dtype=torch.uint8), torch.empty(40)
    ptrs = out.data_ptr(), absmax.data_ptr()
    torch.ops.bnb.quantize_blockwise_into(A, CODE, 128, out, absmax)
    assert (out.data_ptr(), absmax.data_ptr()) == ptrs
    assert_same_bits(out, q_ref)
    assert_same_bits(absmax, absmax_ref)
    # Non-contiguous destinations of the right shape get the same values.
    out_t, absmax_s = torch.empty(125, 40, dtype=torch.uint8).t(), torch.empty(80)[::2]
    torch.ops.bnb.quantize_blockwise_into(A, CODE, 128, out_t, absmax_s)
    assert_same_bits(out_t.contiguous(), q_ref)
    assert_same_bits(absmax_s.contiguous(), absmax_ref)


def test_out_arguments_aliasing_inputs_get_the_right_values():
    # dequantize into the very memory that holds the codes
    q, absmax = torch.ops.bnb.quantize_blockwise(torch.randn(1000), CODE, 64)
    store = torch.empty(1000)
    codes_in_store = store.view(torch.uint8)[:1000]
    codes_in_store.copy_(q)
    torch.ops.bnb.dequantize_blockwise.out(codes_in_store, absmax, CODE, 64, torch.float32, out=store)
    assert_same_bits(store, ref.dequantize_blockwise(q, absmax, CODE, 64, torch.float32))
    # quantize into the first bytes of the input itself
    A = torch.randn(1000)
    want_q, want_absmax = ref.quantize_blockwise(A.clone(), CODE, 64)
    absmax_out = torch.empty(16)
    torch.ops.bnb.quantize_blockwise_into(A, CODE, 64, A.view(torch.uint8)[:1000], absmax_out)
    assert_same_bits(A.view(torch.uint8)[:1000], want_q)
    assert_same_bits(absmax_out, want_absmax)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("signed", [True, False])
def test_codes_are_exactly_nearest_around_every_midpoint(device, signed):
    # A leading 1.0 makes the block's absmax 1, so each value is its own scaled value. Among these are floats equal
    # to a rounded midpoint that lies above the true one (-0.015625 between codes 93 and 94 of the signed map).
    code = F.create_dynamic_map(signed=signed)
    v = values_around_midpoints(code.tolist())
    A = torch.tensor([1.0] + v, device=device)
    q, absmax = torch.ops.bnb.quantize_blockwise(A, code.to(device), 4096)
    assert absmax.tolist() == [1.0]
    assert q[1:].tolist() == exactly_nearest_codes(v, code.tolist())

