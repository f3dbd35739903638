"""bnb.functional against bitsandbytes' API: the dynamic map, QuantState, nested statistics, state-dict keys."""

import pytest
import torch

import bnb
from bnb import functional as F
from helpers import FLOAT_DTYPES, assert_same_bits, devices


def bitsandbytes_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bitsandbytes' create_dynamic_map (functional.py), statement for statement in torch: the independent oracle.
    Raises AssertionError where bitsandbytes does."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed else
                             2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    if additional_items > 0:
        boundaries = torch.linspace(0.1, 1, additional_items + 1, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 2**total_bits
    gap = 256 - len(data)
    for i in range(gap):
        data.append(0)
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


FMA_LINSPACE = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.mark.skipif(not FMA_LINSPACE, reason="bitsandbytes' map comes from torch.linspace, which rounds twice (up "
                                             "to 2 ulps apart) in torch's CPU kernels without FMA; bnb follows FMA")
@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_map_equals_bitsandbytes_for_every_argument_it_takes(signed):
    # Every total_bits 1..8 and max_exponent_bits 1..10: equal bit for bit, or an error where bitsandbytes asserts.
    taken = 0
    for total_bits in range(1, 9):
        for meb in range(1, 11):
            try:
                theirs = bitsandbytes_dynamic_map(signed, meb, total_bits)
            except AssertionError:
                with pytest.raises(ValueError, match=rf"max_exponent_bits={meb}, total_bits={total_bits}\) "
                                                     rf"describes \d+ values, not 2\^total_bits"):
                    F.create_dynamic_map(signed, meb, total_bits)
                continue
            assert_same_bits(F.create_dynamic_map(signed, meb, total_bits), theirs)
            taken += 1
    assert taken == (80 if signed else 7)  # bitsandbytes takes every signed case, and unsigned ones with meb = bits - 1


def test_dynamic_map_bad_arguments():
    with pytest.raises(ValueError, match=r"total_bits must be in 1..8"):
        F.create_dynamic_map(True, 7, 9)
    with pytest.raises(ValueError, match=r"max_exponent_bits must be in 1..64"):
        F.create_dynamic_map(True, 0, 8)  # bitsandbytes fails too (its loop never sets i)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("nested", [False, True])
def test_roundtrip_and_state(device, dtype, nested):
    A = torch.randn(300, 700, device=device).to(dtype)
    q, state = F.quantize_blockwise(A, blocksize=256, nested=nested)
    assert q.shape == A.shape and q.dtype == torch.uint8
    assert state.dtype == dtype and state.blocksize == 256 and state.nested == nested
    back = F.dequantize_blockwise(q, state)
    assert back.dtype == dtype and back.shape == A.shape
    assert (back.float() - A.float()).abs().mean() < 0.011 * 2  # scale of randn*1, blocksize 256
    if nested:
        assert state.absmax.dtype == torch.uint8 and state.state2.absmax.dtype == torch.float32
        plain, plain_state = F.quantize_blockwise(A, blocksize=256)
        assert_same_bits(q, plain)  # nesting changes only how absmax is stored
        absmax = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
        assert torch.allclose(absmax, plain_state.absmax, rtol=0.02)


def test_absmax_only_and_out_arguments():
    A = torch.randn(10000)
    q, state = F.quantize_blockwise(A, blocksize=4096)
    back = F.dequantize_blockwise(q, absmax=state.absmax, blocksize=4096)  # dynamic map, float32 by default
    assert_same_bits(back, F.dequantize_blockwise(q, state))
    out = torch.empty(10000)
    assert F.dequantize_blockwise(q, state, out=out) is out
    q_out, absmax_out = torch.empty(10000, dtype=torch.uint8), torch.empty(3)
    q2, state2 = F.quantize_blockwise(A, absmax=absmax_out, out=q_out)
    assert q2 is q_out and state2.absmax is absmax_out
    assert_same_bits(q_out, q)
    assert_same_bits(absmax_out, state.absmax)
    q3, state3 = F.quantize_blockwise(A, out=torch.empty(10000, dtype=torch.uint8))  # out alone
    assert_same_bits(q3, q)
    assert_same_bits(state3.absmax, state.absmax)
    nested_absmax = torch.empty(3, dtype=torch.uint8)  # nested: receives the quantized absmax
    _, state4 = F.quantize_blockwise(A, absmax=nested_absmax, nested=True)
    assert state4.absmax is nested_absmax
    assert_same_bits(nested_absmax, F.quantize_blockwise(A, nested=True)[1].absmax)
    q, state = F.quantize_blockwise(torch.randn(300), blocksize=64)
    with pytest.raises(ValueError, match=r"absmax holds 5 values, but A's 300 in blocks of 4096 need 1; pass the "
                                         r"blocksize A was quantized with"):
        F.dequantize_blockwise(q, absmax=state.absmax)
    with pytest.raises(ValueError, match="requires either quant_state or absmax"):
        F.dequantize_blockwise(q)


def test_out_arguments_are_checked_before_anything_is_written():
    A = torch.randn(1000)
    for absmax, what in ((torch.empty(7, dtype=torch.uint8), "got torch.uint8 of shape \\(7,\\)"),
                         (torch.empty(2, 16, dtype=torch.uint8), "got torch.uint8 of shape \\(2, 16\\)"),  # broadcasts
                         (torch.empty(16), "got torch.float32")):
        q = torch.zeros(1000, dtype=torch.uint8)
        want = "absmax receives the 16 quantized absmax codes: expected torch.uint8 of shape \\(16,\\), "
        with pytest.raises(ValueError, match=want + what):
            F.quantize_blockwise(A, out=q, absmax=absmax, blocksize=64, nested=True)
        assert not q.any()
    for bad in (0, -64, 48):  # the op's own message, not a ZeroDivisionError from sizing absmax
        with pytest.raises(RuntimeError, match=f"blocksize must be a power of two in \\[32, 1073741824\\], got {bad}"):
            F.quantize_blockwise(A, out=torch.zeros(1000, dtype=torch.uint8), blocksize=bad)


@pytest.mark.parametrize("nested", [False, True])
def test_state_dict_round_trip(nested):
    A = torch.randn(100, 100, dtype=torch.float16)
    q, state = F.quantize_blockwise(A, blocksize=64, nested=nested)
    d = state.as_dict()
    expected = {"quant_type", "absmax", "blocksize", "quant_map", "dtype", "shape"}
    if nested:
        expected |= {"nested_absmax", "nested_blocksize", "nested_quant_map", "nested_dtype", "nested_offset"}
    assert set(d) == expected
    assert d["dtype"] == "float16" and d["quant_type"] is None
    # bitsandbytes 0.50: an 8-bit state has no quant_type to name the packed key, and packed=True gives the plain
    # dict (code written for it calls as_dict(packed=True) on any state).
    packed = state.as_dict(packed=True)
    assert set(packed) == expected and packed["dtype"] == "float16" and packed["absmax"] is d["absmax"]
    again = bnb.QuantState.from_dict(d, device=torch.device("cpu"))
    assert again == state
    assert_same_bits(F.dequantize_blockwise(q, again), F.dequantize_blockwise(q, state))


def test_quant_state_list_layout_and_errors():
    A = torch.randn(5000)
    _, state = F.quantize_blockwise(A, blocksize=1024, nested=True)
    assert state[2] == torch.float32 and state[3] == 1024 and state[4][1] is state.state2
    with pytest.raises(ValueError, match="found neither"):
        bnb.QuantState.from_dict({"absmax": torch.ones(1)}, device="cpu")
    with pytest.raises(ValueError, match="unknown keys"):
        bnb.QuantState.from_dict({"quant_type": None, "bogus": 1}, device="cpu")


def test_has_avx512bf16_agrees_with_the_kernel_s_cpu_flags():
    # bitsandbytes' tests and user code branch on it; /proc/cpuinfo is Linux's independent account of CPUID.
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith(("flags", "Features"))).split(":", 1)[1].split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags here")
    assert F.has_avx512bf16() is ("avx512_bf16" in flags)
