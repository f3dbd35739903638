"""LLM.int8()'s Python API: bnb.functional's int8 helpers and codebook makers, bnb.matmul with MatmulLtState and its
gradients. Against the pure-torch definition (bnb.reference.int8), float64 products, hand-computed and published
values, and bitsandbytes' error bounds (its tests/test_functional.py and tests/test_autograd.py)."""

import math
import re
import warnings

import pytest
import torch

import bnb
from bnb import functional as F
from bnb.reference import int8 as ref
from helpers import FLOAT_DTYPES, assert_same_bits

# Relative rounding error of one result in each dtype (half an ulp), for bounds on a float64 reference.
EPS = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def randn(*shape, seed=0, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def xavier(n, k, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    bound = math.sqrt(6 / (n + k))
    return ((torch.rand(n, k, generator=g) * 2 - 1) * bound).to(dtype)


def count_not_close(a, b, atol, rtol):
    return (~torch.isclose(a.float(), b.float(), atol=atol, rtol=rtol)).sum().item()


# ---------------------------------------------------------------------------------------------------------------
# bnb.functional: the wrappers call the ops with the right arguments (bit for bit the definition)

@pytest.mark.parametrize("threshold", [0.0, 6.0])
def test_functional_quantization_equals_the_definition(threshold):
    A = randn(3, 5, 96, seed=1, scale=3, dtype=torch.float16)
    for got, want in zip(F.int8_vectorwise_quant(A, threshold), ref.int8_vectorwise_quant(A, threshold)):
        assert (got is None) == (want is None) and (got is None or assert_same_bits(got, want) is None)
    for got, want in zip(F.int8_double_quant(A, threshold=threshold), ref.int8_double_quant(A, threshold)):
        assert (got is None) == (want is None) and (got is None or assert_same_bits(got, want) is None)
    codes, stats, _ = ref.int8_vectorwise_quant(A, threshold)
    assert_same_bits(F.int8_vectorwise_dequant(codes, stats), ref.int8_vectorwise_dequant(codes, stats))


def test_functional_products_equal_the_definition():
    g = torch.Generator().manual_seed(2)
    A = torch.randint(-127, 128, (2, 7, 64), generator=g, dtype=torch.int8)
    B = torch.randint(-127, 128, (24, 64), generator=g, dtype=torch.int8)
    rs, cs = torch.rand(14, generator=g) * 4, torch.rand(24, generator=g) * 4
    bias = torch.randn(24, generator=g)
    C = ref.int8_linear_matmul(A, B)
    assert_same_bits(F.int8_linear_matmul(A, B), C)
    out = torch.empty(2, 7, 24, dtype=torch.int32)
    assert F.int8_linear_matmul(A, B, out=out) is out
    assert_same_bits(out, C)
    assert_same_bits(F.int8_mm_dequant(C, rs, cs), ref.int8_mm_dequant(C, rs, cs))  # float16, as bitsandbytes
    assert_same_bits(F.int8_mm_dequant(C, rs, cs, bias=bias), ref.int8_mm_dequant(C, rs, cs, None, bias))
    # out= decides the dtype: computed in float32 and rounded once, not through float16.
    out = torch.empty(2, 7, 24)
    assert F.int8_mm_dequant(C, rs, cs, out=out, bias=bias) is out
    assert_same_bits(out, ref.int8_mm_dequant(C, rs, cs, torch.float32, bias))
    assert_same_bits(F.int8_scaled_mm(A, B, rs, cs, bias, torch.bfloat16),
                     ref.int8_scaled_mm(A, B, rs, cs, bias, torch.bfloat16))
    assert F.int8_scaled_mm(A, B, rs, cs).dtype == torch.float16


@pytest.mark.parametrize("call, error, message", [
    (lambda: F.int8_double_quant(torch.ones(4, 4), col_stats=torch.ones(4)), ValueError,
     "col_stats must be None. int8_double_quant() does not support pre-allocated col_stats."),
    (lambda: F.int8_double_quant(torch.ones(4, 4), out_row=torch.ones(4, 4, dtype=torch.int8)), ValueError,
     "out_row must be None"),
    (lambda: F.int8_linear_matmul(torch.ones(2, 4, dtype=torch.int8), torch.ones(3, 4, dtype=torch.int8),
                                  dtype=torch.int64), ValueError, "dtype must be torch.int32"),
    (lambda: F.int8_linear_matmul(torch.ones(2, 4), torch.ones(3, 4, dtype=torch.int8)), RuntimeError,
     "bnb::int8_linear_matmul: A must be int8, got float32"),
    (lambda: F.int8_linear_matmul(torch.ones(2, 4, dtype=torch.int8), torch.ones(3, 5, dtype=torch.int8)),
     RuntimeError, "A has 4 columns but B [3, 5] has 5"),
    (lambda: F.int8_mm_dequant(torch.ones(2, 3, dtype=torch.int32), torch.ones(2), torch.ones(3),
                               out=torch.empty(3, 2)), ValueError, "out must have A's shape [2, 3], got [3, 2]"),
    (lambda: F.int8_mm_dequant(torch.ones(2, 3, dtype=torch.int32), torch.ones(2), torch.ones(3),
                               out=torch.empty(2, 3), dtype=torch.float16), ValueError,
     "dtype torch.float16 disagrees with out's dtype torch.float32"),
    (lambda: F.int8_mm_dequant(torch.ones(2, 3, dtype=torch.int32), torch.ones(3), torch.ones(3)), RuntimeError,
     "row_stats must hold 2 values (one per row of A), got 3"),
    (lambda: F.int8_vectorwise_dequant(torch.ones(2, 3, dtype=torch.int8), torch.ones(3)), RuntimeError,
     "stats must hold 2 values (one per row of A), got 3"),
    (lambda: F.int8_vectorwise_quant(torch.ones(2, 3, dtype=torch.int8)), RuntimeError,
     "A must be float32, float16 or bfloat16, got int8"),
])
def test_functional_bad_input_gives_a_clear_error(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


# bitsandbytes' tests/test_functional.py (TestLLMInt8Functional), ported: its reference row-wise quantization, and
# the bounds it asserts.

def naive_vectorwise_quant(x, dim):
    absmax = x.abs().amax(dim=dim, keepdim=True)
    return torch.round(x * (127.0 / absmax)).to(torch.int8), absmax


@pytest.mark.parametrize("dim1, dim4", [(64, 64), (256, 1024)])
@pytest.mark.parametrize("has_bias", [False, True])
def test_int8_mm_dequant_meets_bitsandbytes_bounds(dim1, dim4, has_bias):
    A, B = randn(dim1, 128, seed=3), randn(dim4, 128, seed=4)
    bias = randn(dim4, seed=5, dtype=torch.float16) if has_bias else None
    C1 = A.half() @ B.half().t()
    if has_bias:
        C1 += bias
    A1, maxA = naive_vectorwise_quant(A, 1)
    B1, maxB = naive_vectorwise_quant(B, 1)
    C2 = F.int8_linear_matmul(A1, B1)
    C4 = (C2.float() * (maxA / 127) * (maxB.t() / 127)).half()
    if has_bias:
        C4 += bias
    std = C1.std(0).view(1, -1)
    C5 = F.int8_mm_dequant(C2, maxA.flatten(), maxB.flatten(), bias=bias)
    torch.testing.assert_close(C5 / std, C4 / std, atol=0.015, rtol=0.1)
    assert count_not_close(C1 / std, C4 / std, atol=0.015, rtol=0.1) <= 0.01 * C1.numel()


def test_int8_double_quant_meets_bitsandbytes_bounds():
    A = randn(2048, 512, seed=6).half()
    col_codes, col_max = naive_vectorwise_quant(A, 0)
    row_codes, row_max = naive_vectorwise_quant(A, 1)
    CA, CAt, statsA, statsAt, cols = F.int8_double_quant(A)
    assert cols is None
    # Within 1 of the float16 reference everywhere (bitsandbytes allows 1 in 500 further off; none is).
    torch.testing.assert_close(CA, row_codes, atol=1, rtol=0)
    torch.testing.assert_close(CAt, col_codes, atol=1, rtol=0)
    torch.testing.assert_close(statsA, row_max.flatten().float())
    torch.testing.assert_close(statsAt, col_max.flatten().float())


@pytest.mark.parametrize("threshold", [2.0, 3.0])
def test_outlier_columns_meet_bitsandbytes_bounds(threshold):
    # bitsandbytes' test_coo_int8_vectorwise_quant: every outlier found, and the other columns dequantized within
    # rtol 0.05, atol 0.015 of A.
    A = randn(512, 1024, seed=7).half()
    outlier = A.abs() >= threshold
    CA, statsA, cols = F.int8_vectorwise_quant(A, threshold=threshold)
    assert torch.equal(cols, outlier.any(0).nonzero().flatten())
    A[:, cols] = 0
    torch.testing.assert_close((CA.float() * statsA.unsqueeze(1) / 127).half(), A, rtol=0.05, atol=1.5e-2)


def test_int8_product_of_random_codes_is_exact():
    # bitsandbytes' test_int8_linear_matmul: against the float product (exact for these sizes), 2-D and 3-D A.
    g = torch.Generator().manual_seed(8)
    B = torch.randint(-128, 127, (512, 499), generator=g, dtype=torch.int8)
    for shape in ((128, 499), (4, 32, 499)):
        A = torch.randint(-128, 127, shape, generator=g, dtype=torch.int8)
        torch.testing.assert_close(F.int8_linear_matmul(A, B).double(), A.double() @ B.double().t(), atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# Codebooks: create_linear_map, create_normal_map, create_fp8_map

# bitsandbytes' NF4 table as published in its get_4bit_type (functional.py).
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def test_normal_map_is_nf4():
    code = F.create_normal_map()
    assert code.dtype == torch.float32 and code.shape == (256,)
    assert code[:7].tolist() == NF4[:7] and code[-9:].tolist() == NF4[7:]
    assert (code[7:-9] == 0).all()
    sym = F.create_normal_map(use_extra_value=False)  # 7 values either side, mirror images
    assert torch.equal(sym[:7], -sym[-7:].flip(0)) and sym[-1] == 1 and (sym[7:-7] == 0).all()
    assert (sym[-7:].diff() > 0).all()


def test_linear_map_by_hand():
    code = F.create_linear_map()  # signed, with a zero: 255 values -1 + i/127, the 256th entry a second zero
    want = [-1 + i / 127 for i in range(127)] + [0.0] + [i / 127 for i in range(128)]
    torch.testing.assert_close(code, torch.tensor(want), atol=1.2e-7, rtol=0)
    assert code[127] == 0  # the padding; linspace's middle value lands within an ulp of 0
    torch.testing.assert_close(F.create_linear_map(add_zero=False), torch.linspace(-1, 1, 256), atol=0, rtol=0)
    torch.testing.assert_close(F.create_linear_map(signed=False), torch.tensor([i / 255 for i in range(256)]),
                               atol=1.2e-7, rtol=0)
    four = F.create_linear_map(True, 4)  # 15 values -1 .. 1 in sevenths, zeros between the halves
    torch.testing.assert_close(four[:7], torch.tensor([-1 + i / 7 for i in range(7)]), atol=1.2e-7, rtol=0)
    torch.testing.assert_close(four[-8:], torch.tensor([i / 7 for i in range(8)]), atol=1.2e-7, rtol=0)
    assert (four[7:-8] == 0).all() and four.numel() == 256


def test_fp8_map_by_hand():
    # 1 sign, 2 exponent, 1 mantissa bits (bias 2; a larger exponent field is a smaller value, as in bitsandbytes):
    # fields 1..3 give (1, 1.5) x 4, 2, 1; field 0 the subnormals 0 and 0.5 x 2^-2.
    mags = [0, 0.125, 1, 1.5, 2, 3, 4, 6]
    want = sorted([m / 6 for m in mags] + [-m / 6 for m in mags] + [0.0] * 240)
    torch.testing.assert_close(F.create_fp8_map(True, 2, 1, 4), torch.tensor(want), atol=0, rtol=0)
    # e4m3 (bias 8): normals (1 + m/8) * 2^k, k in -6..8; subnormals m/8 * 2^-8; over the largest, 1.875 * 2^8.
    mags = {(1 + m / 8) * 2.0**k for m in range(8) for k in range(-6, 9)} | {m / 8 * 2.0**-8 for m in range(8)}
    want = torch.tensor(sorted(mags | {-v for v in mags}), dtype=torch.float64) / 480
    assert torch.equal(F.create_fp8_map(True, 4, 3, 8).double().unique(), want.float().double().unique())
    with pytest.raises(ValueError, match=r"exponent_bits \(4\) \+ precision_bits \(4\) must be total_bits \(8\) less "
                                         r"the sign bit \(1\)"):
        F.create_fp8_map(True, 4, 4, 8)


@pytest.mark.parametrize("bits", range(2, 9))
@pytest.mark.parametrize("method", ["linear", "fp8", "dynamic"])
def test_few_bit_maps_as_bitsandbytes_tests_them(bits, method):
    # bitsandbytes' test_few_bit_quant: 2^bits or 2^bits - 1 distinct values in 256 entries; and blockwise
    # quantization takes each value's nearest code (its error is the distance to the nearest code).
    if method == "linear":
        code = F.create_linear_map(True, total_bits=bits)
    elif method == "fp8":
        ebits = math.ceil(bits / 2)
        code = F.create_fp8_map(True, ebits, bits - ebits - 1, bits)
    else:
        code = F.create_dynamic_map(True, bits, bits)
    assert code.numel() == 256 and code.unique().numel() in (2**bits, 2**bits - 1)
    values = randn(1, 32, seed=bits)
    values /= values.abs().max()
    q, state = F.quantize_blockwise(values, code=code)
    err = (F.dequantize_blockwise(q, state) - values).abs()
    nearest = (values.reshape(-1, 1) - code.reshape(1, -1)).abs().min(dim=1).values.reshape(values.shape)
    torch.testing.assert_close(err, nearest, atol=1e-7, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# bnb.matmul and MatmulLtState

def weight_codes(W):
    """The weight's codes and scales by the definition."""
    CB, SCB, _ = ref.int8_vectorwise_quant(W, 0.0)
    return CB, SCB


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("threshold", [0.0, 6.0])
@pytest.mark.parametrize("shape", [(40, 64), (2, 20, 64), (64,)])
def test_matmul_is_the_ops_composed(dtype, threshold, shape):
    # The forward is exactly the definition's ops: A quantized with the threshold, then int8_scaled_mm or
    # int8_mixed_scaled_mm with the weight's codes and the bias.
    A = randn(*shape, seed=9, scale=2.5, dtype=dtype)
    W, bias = xavier(48, 64, seed=10, dtype=dtype), randn(48, seed=11, dtype=dtype)
    CB, SCB = weight_codes(W)
    state = bnb.MatmulLtState(has_fp16_weights=False, threshold=threshold)
    state.CB, state.SCB = CB, SCB
    got = bnb.matmul(A, None, state=state, bias=bias)
    CA, SCA, cols = ref.int8_vectorwise_quant(A, threshold)
    if threshold:
        assert cols.numel() > 0 and torch.equal(state.idx, cols)
        want = ref.int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, cols, bias)[0]
    else:
        want = ref.int8_scaled_mm(CA, CB, SCA, SCB, bias, dtype)
    assert_same_bits(got, want)
    assert got.shape == (*shape[:-1], 48) and got.dtype == dtype


def test_matmul_threshold_argument_sets_the_state_and_a_float_weight_is_quantized_once():
    A, W = randn(8, 64, seed=12, scale=3), xavier(16, 64, seed=13)
    state = bnb.MatmulLtState(has_fp16_weights=False)
    y = bnb.matmul(A, W, state=state, threshold=6.0)
    assert state.threshold == 6.0 and state.idx is not None
    CB, SCB = weight_codes(W)
    assert_same_bits(state.CB, CB)
    assert_same_bits(state.SCB, SCB)
    codes = state.CB
    W.mul_(2)  # has_fp16_weights=False: the codes are the weight now, as bitsandbytes keeps them
    assert_same_bits(bnb.matmul(A, W, state=state), y)
    assert state.CB is codes


def test_fp16_weights_are_quantized_at_every_call_in_eval_mode_too():
    # bitsandbytes reuses the codes of an earlier call in eval mode (is_training=False) or while B.grad is set, and
    # then multiplies by a weight the optimizer has changed since.
    A, W = randn(8, 64, seed=14), xavier(16, 64, seed=15).requires_grad_(True)
    state = bnb.MatmulLtState(has_fp16_weights=True)
    bnb.matmul(A, W, state=state).sum().backward()
    assert W.grad is not None
    with torch.no_grad():
        W.mul_(-1)
    state.is_training = False
    CB, SCB = weight_codes(W.detach())
    CA, SCA, _ = ref.int8_vectorwise_quant(A, 0.0)
    assert_same_bits(bnb.matmul(A, W, state=state), ref.int8_scaled_mm(CA, CB, SCA, SCB, None, torch.float32))


# The factor the ops scale int32 products by: the float32 nearest 1/127^2 (bitsandbytes' CUDA kernel's 6.200012e-05;
# its pure-torch backend has a typo, 6.200124e-05, 1.8e-5 too large).
PRODUCT_SCALE = ref.INV_127_SQUARED


def test_product_scale_is_1_over_127_squared():
    # 127 * 127 with unit scales is 1: 16129 * 6.2000123e-05 rounds to 1.0 in float32, 16129 * 6.200124e-05 does not.
    one = F.int8_mm_dequant(torch.tensor([[16129]], dtype=torch.int32), torch.ones(1), torch.ones(1),
                            dtype=torch.float32)
    assert one.item() == 1.0


def float64_forward(A, CB, SCB, threshold, bias):
    """The LLM.int8() product in float64 from the definition's codes: the int8 part exactly, plus A's outlier columns
    times the dequantized weight's, plus the bias."""
    CA, SCA, cols = ref.int8_vectorwise_quant(A, threshold)
    rows = ref.rows_of(CA).double() @ CB.double().t() * SCA.double()[:, None] * SCB.double()[None, :] * PRODUCT_SCALE
    Wd = CB.double() * SCB.double()[:, None] / 127
    if cols is not None:
        rows = rows + ref.rows_of(A).double()[:, cols] @ Wd[:, cols].t()
    if bias is not None:
        rows = rows + bias.double()
    return rows.view(*A.shape[:-1], -1), Wd, cols


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("threshold", [0.0, 6.0])
@pytest.mark.parametrize("has_fp16_weights", [False, True])
@pytest.mark.parametrize("shape", [(24, 64), (3, 8, 64)])
def test_gradients_against_a_float64_reference(dtype, threshold, has_fp16_weights, shape):
    A0 = randn(*shape, seed=16, scale=2.5, dtype=dtype)
    A0[..., 5] = 7.5  # an outlier column at threshold 6
    W0, bias0 = xavier(48, 64, seed=17, dtype=dtype), randn(48, seed=18, dtype=torch.float32)
    A, bias = A0.clone().requires_grad_(True), bias0.clone().requires_grad_(True)
    CB, SCB = weight_codes(W0)
    state = bnb.MatmulLtState(has_fp16_weights=has_fp16_weights, threshold=threshold)
    if has_fp16_weights:
        W = W0.clone().requires_grad_(True)
    else:
        W, state.CB, state.SCB = CB, CB, SCB
    out = bnb.matmul(A, W, state=state, bias=bias)
    grad = randn(*out.shape, seed=19, dtype=dtype)
    out.backward(grad)

    want, Wd, cols = float64_forward(A0, CB, SCB, threshold, bias0)
    eps = EPS[dtype]
    # The forward: float32 accumulations rounded once to dtype (the outlier part summed in dtype: 64 terms).
    scale = want.abs().amax().item()
    torch.testing.assert_close(out.double(), want, atol=scale * (2 * eps + 64 * eps * (threshold > 0)), rtol=0)
    # d/dA = grad @ W_deq, the forward's own weight; summed in dtype.
    g = grad.double().reshape(-1, 48)
    gA = (g @ Wd).view(shape)
    torch.testing.assert_close(A.grad.double(), gA, atol=(g.abs() @ Wd.abs()).amax().item() * 70 * eps, rtol=0)
    # d/dbias: grad summed over every leading dimension.
    torch.testing.assert_close(bias.grad.double(), g.sum(0), atol=g.abs().sum(0).amax().item() * 2**-23, rtol=0)
    if not has_fp16_weights:
        return
    # d/dW = grad.T @ A: grad and A quantized column-wise, their exact int8 product; A's outlier columns exactly.
    _, Cgt, _, SCgt, _ = ref.int8_double_quant(grad.reshape(-1, 48), 0.0)
    _, CAt, _, SCAt, _ = ref.int8_double_quant(ref.rows_of(A0), threshold)
    if cols is not None:
        CAt[:, cols] = 0
    gW = Cgt.double().t() @ CAt.double() * SCgt.double()[:, None] * SCAt.double()[None, :] * PRODUCT_SCALE
    if cols is not None:
        gW[:, cols] = g.t() @ ref.rows_of(A0).double()[:, cols]
    torch.testing.assert_close(W.grad.double(), gW, atol=gW.abs().amax().item() * 4 * eps, rtol=0)
    # ... and within the quantization's error of the true gradient.
    exact = g.t() @ ref.rows_of(A0).double()
    assert (W.grad.double() - exact).abs().mean() < 0.03 * exact.abs().mean()
    if cols is not None:  # the outlier columns are exact (bitsandbytes counts their other elements twice)
        torch.testing.assert_close(W.grad.double()[:, cols], exact[:, cols], atol=exact.abs().amax().item() * 8 * eps,
                                   rtol=0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("has_fp16_weights", [False, True])
def test_matmul8bitfp_is_the_dequantized_weights_product_and_gradients(dtype, has_fp16_weights):
    """bitsandbytes' dequantize-and-matmul path: the forward and every gradient against float64 products of the
    dequantized weight (CB * SCB / 127, rounded to A's dtype), with A not quantized."""
    shape = (3, 8, 64)
    A0 = randn(*shape, seed=20, scale=2.0, dtype=dtype)
    A0[..., 5] = 7.5  # would be an outlier to LLM.int8(): here it is simply multiplied
    W0, bias0 = xavier(48, 64, seed=21, dtype=dtype), randn(48, seed=22, dtype=torch.float32)
    A, bias = A0.clone().requires_grad_(True), bias0.clone().requires_grad_(True)
    CB, SCB = weight_codes(W0)
    state = bnb.MatmulLtState(has_fp16_weights=has_fp16_weights, threshold=6.0)
    if has_fp16_weights:
        W = W0.clone().requires_grad_(True)
    else:
        W, state.CB, state.SCB = CB, CB, SCB
    out = bnb.autograd.MatMul8bitFp.apply(A, W, None, bias, state)
    grad = randn(*out.shape, seed=23, dtype=dtype)
    out.backward(grad)
    assert out.dtype == dtype and out.shape == (3, 8, 48)
    assert torch.equal(state.CB, CB) and torch.equal(state.SCB, SCB)  # a float weight's codes kept, as bitsandbytes

    Wq = (CB.double() * SCB.double()[:, None] / 127).to(dtype).double()  # the weight in A's dtype
    A2, g = A0.double().reshape(-1, 64), grad.double().reshape(-1, 48)
    eps = EPS[dtype]
    want = A2 @ Wq.t() + bias0.to(dtype).double()
    bound = (A2.abs() @ Wq.t().abs() + bias0.double().abs()).amax().item() * 70 * eps
    torch.testing.assert_close(out.double().reshape(-1, 48), want, atol=bound, rtol=0)
    torch.testing.assert_close(A.grad.double().reshape(-1, 64), g @ Wq,
                               atol=(g.abs() @ Wq.abs()).amax().item() * 50 * eps, rtol=0)
    torch.testing.assert_close(bias.grad.double(), g.sum(0), atol=g.abs().sum(0).amax().item() * 2**-23, rtol=0)
    if has_fp16_weights:  # grad.T @ A in float32, rounded once to B's dtype
        gW = g.t() @ A2
        torch.testing.assert_close(W.grad.double(), gW, atol=(g.abs().t() @ A2.abs()).amax().item() * (eps + 2**-20),
                                   rtol=0)
    else:
        assert W.grad is None


def test_matmul8bitfp_bad_input_gives_a_clear_error():
    state = bnb.MatmulLtState(has_fp16_weights=True)
    with pytest.raises(RuntimeError,
                       match=r"A has 32 columns \(shape \[4, 32\]\), but the weight is \[N, K\] = \[8, 16\]"):
        bnb.autograd.MatMul8bitFp.apply(torch.randn(4, 32), torch.randn(8, 16), None, None, state)
    with pytest.raises(RuntimeError, match=r"A must be float32, float16 or bfloat16, got int32"):
        bnb.autograd.MatMul8bitFp.apply(torch.ones(4, 16, dtype=torch.int32), torch.randn(8, 16), None, None, state)


# bitsandbytes' test_matmullt (tests/test_autograd.py), ported: A [dim2, 32] (outlier columns at 6.0 with decomp),
# B Xavier-uniform [48, 32], the error bounds it asserts on the output and on A's and the bias' gradients.
@pytest.mark.parametrize("dim2", [64, 0])
@pytest.mark.parametrize("decomp", [0.0, 6.0])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("has_fp16_weights", [True, False])
@pytest.mark.parametrize("has_bias", [True, False])
def test_matmul_meets_bitsandbytes_bounds(dim2, decomp, dtype, has_fp16_weights, has_bias):
    torch.manual_seed(20)
    for _ in range(3):
        A = torch.randn(dim2, 32, dtype=dtype, requires_grad=True)
        if decomp:
            with torch.no_grad():
                A[:, torch.randint(0, 32, (4,))] = 6.0
        B = torch.empty(48, 32, dtype=dtype)
        torch.nn.init.xavier_uniform_(B)
        target = torch.randn(dim2, 48, dtype=dtype)
        bias = torch.randn(48, dtype=dtype, requires_grad=True) if has_bias else None
        state = bnb.MatmulLtState(threshold=decomp, has_fp16_weights=has_fp16_weights)
        B2 = B
        if not has_fp16_weights:
            state.CB, state.SCB, _ = F.int8_vectorwise_quant(B)
            B2 = state.CB
        out_torch = A @ B.t() + (bias if has_bias else 0)
        out_bnb = bnb.matmul(A, B2, state=state, bias=None if bias is None else bias.detach().clone()
                             .requires_grad_(True))
        assert out_bnb.dtype == dtype and out_bnb.shape == (dim2, 48)
        n = out_bnb.numel()
        assert count_not_close(out_bnb, out_torch, atol=0.01, rtol=0.1) <= n * (0.0175 if dtype == torch.float16
                                                                                 else 0.021)
        assert count_not_close(out_bnb, out_torch, atol=0.035, rtol=0.2) <= n * 0.001
        # As there: the loss of bnb's output (its values replaced by torch's) against torch's own.
        out_bnb.data.copy_(out_torch)
        torch.nn.functional.mse_loss(out_bnb, target).backward()
        grad_A_bnb = A.grad
        A.grad = None
        torch.nn.functional.mse_loss(out_torch, target).backward()
        torch.testing.assert_close(grad_A_bnb, A.grad, atol=0.015, rtol=0.1)
        if dim2 == 0:
            assert (grad_A_bnb == 0).all()


def test_empty_input_gives_zeros_and_zero_gradients():
    W = xavier(16, 32, seed=21)
    bias = randn(16, seed=22).requires_grad_(True)
    for A in (torch.empty(0, 32, requires_grad=True), torch.empty(2, 0, 32, requires_grad=True)):
        state = bnb.MatmulLtState(has_fp16_weights=False)
        state.CB, state.SCB = weight_codes(W)
        out = bnb.matmul(A, None, state=state, bias=bias)
        assert out.shape == (*A.shape[:-1], 16)
        out.sum().backward()
        assert A.grad.shape == A.shape and bias.grad is not None and (bias.grad == 0).all()
        bias.grad = None


def test_matmul_out_argument():
    A, W = randn(4, 32, seed=23), xavier(8, 32, seed=24)
    out = torch.empty(4, 8)
    assert bnb.matmul(A, W, out=out) is out
    assert_same_bits(out, bnb.matmul(A, W))
    with pytest.raises(RuntimeError, match=re.escape("out must be float32 of shape [4, 8], got float16 of shape "
                                                     "[4, 8]")):
        bnb.matmul(A, W, out=torch.empty(4, 8, dtype=torch.float16))


def state_with(W, **kw):
    state = bnb.MatmulLtState(has_fp16_weights=False, **kw)
    state.CB, state.SCB = weight_codes(W)
    return state


@pytest.mark.parametrize("call, message", [
    (lambda: bnb.matmul(torch.ones(4, 32, dtype=torch.int8), xavier(8, 32, 0)),
     "bnb.matmul: A must be float32, float16 or bfloat16, got int8"),
    (lambda: bnb.matmul(torch.ones(4, 32, dtype=torch.float64), xavier(8, 32, 0)),
     "bnb.matmul: A must be float32, float16 or bfloat16, got float64"),
    (lambda: bnb.matmul(torch.ones(4, 33), xavier(8, 32, 0)),
     "bnb.matmul: A has 33 columns (shape [4, 33]), but the weight is [N, K] = [8, 32]"),
    (lambda: bnb.matmul(torch.ones(4, 33), None, state=state_with(xavier(8, 32, 0))),
     "A has 33 columns"),
    (lambda: bnb.matmul(torch.ones(4, 32), xavier(8, 32, 0), bias=torch.ones(7)),
     "bnb.matmul: bias must be a float vector of 8 values (one per output), got float32 of shape [7]"),
    (lambda: bnb.matmul(torch.ones(4, 32), weight_codes(xavier(8, 32, 0))[0], state=bnb.MatmulLtState(
        has_fp16_weights=False)), "B holds int8 codes (shape [8, 32]), but neither B.SCB nor state.SCB holds their row "
                                  "scales"),
    (lambda: bnb.matmul(torch.ones(4, 32), weight_codes(xavier(8, 32, 0))[0]),
     "B holds int8 codes (shape [8, 32]), but state.has_fp16_weights=True expects a float weight"),
    (lambda: bnb.matmul(torch.ones(4, 32), torch.ones(8, 32, dtype=torch.int32)),
     "B must be a float32, float16 or bfloat16 weight [N, K] or int8 codes, got int32 of shape [8, 32]"),
    (lambda: bnb.matmul(torch.ones(4, 32), None, state=bnb.MatmulLtState(has_fp16_weights=False, CB=torch.ones(
        8, 32), SCB=torch.ones(8))), "state.CB must be int8 codes [N, K], got float32 of shape [8, 32]"),
    (lambda: bnb.matmul(torch.ones(4, 32), None, state=bnb.MatmulLtState(has_fp16_weights=False, CB=torch.ones(
        8, 32, dtype=torch.int8), SCB=torch.ones(7))),
     "state.SCB must hold 8 float32 row scales (one per row of the weight [8, 32]), got float32 of shape [7]"),
    (lambda: bnb.matmul(torch.ones(4, 32, requires_grad=True), None, state=bnb.MatmulLtState(
        has_fp16_weights=False, CB=torch.ones(8, 32, dtype=torch.int8), SCB=torch.ones(8, dtype=torch.float16))),
     "state.SCB must hold 8 float32 row scales"),
    (lambda: bnb.matmul(torch.ones(4, 32), xavier(8, 32, 0), state=bnb.MatmulLtState(threshold=-1.0)),
     "bnb::int8_vectorwise_quant: threshold must be >= 0"),
])
def test_matmul_bad_input_gives_a_clear_error(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


def test_negative_threshold_argument_is_an_error():
    # bitsandbytes ignores a threshold <= 0 (it leaves state.threshold); a negative one is a mistake, said so.
    with pytest.raises(ValueError, match=re.escape("bnb.matmul: threshold must be >= 0 (0 leaves state.threshold as "
                                                   "it is), got -1.0")):
        bnb.matmul(torch.ones(4, 32), xavier(8, 32, 0), threshold=-1.0)


def test_matmullt_state_as_bitsandbytes_has_it():
    state = bnb.MatmulLtState()
    assert state.threshold == 0.0 and state.has_fp16_weights and state.is_training and state.CB is None
    with pytest.warns(FutureWarning, match="MatmulLtState.CxB is deprecated"):
        assert state.CxB is None
    with pytest.raises(AttributeError):
        state.nonexistent
    state.CB, state.SCB = torch.ones(2, 2, dtype=torch.int8), torch.ones(2)
    state.reset_grads()
    assert state.CB is None and state.SCB is None
    assert bnb.matmul is bnb.autograd_int8.matmul and "matmul" in bnb.__all__ and "MatmulLtState" in bnb.__all__
    for name in ("int8_vectorwise_quant", "int8_vectorwise_dequant", "int8_double_quant", "int8_linear_matmul",
                 "int8_mm_dequant", "int8_scaled_mm", "create_linear_map", "create_normal_map", "create_fp8_map"):
        assert name in F.__all__ and callable(getattr(F, name))


def test_compiled_matmul_with_gradients_equals_eager():
    A, W = randn(16, 64, seed=25, scale=3), xavier(32, 64, seed=26)
    bias = randn(32, seed=27)

    def f(a, w, b, threshold):
        state = bnb.MatmulLtState(has_fp16_weights=True, threshold=threshold)
        return bnb.matmul(a, w, state=state, bias=b)

    for threshold in (0.0, 6.0):
        torch.compiler.reset()
        compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
        grads = []
        for fn in (f, compiled):
            a, w, b = (t.clone().requires_grad_(True) for t in (A, W, bias))
            y = fn(a, w, b, threshold)
            y.backward(torch.ones_like(y))
            grads.append((y, a.grad, w.grad, b.grad))
        for eager, comp in zip(*grads):
            assert_same_bits(comp, eager)


def test_no_warning_for_float32_input():
    # bitsandbytes logs that it casts A to float16; bnb quantizes A in its own dtype and has nothing to say.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bnb.matmul(randn(4, 32), xavier(8, 32, 0))
