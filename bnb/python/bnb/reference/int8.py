"""LLM.int8() in plain torch: the definition the C++ kernels (bnb/ops/int8) match bit for bit.

Rows are the input's leading dimensions flattened (a 1-D input is one row); K is its last dimension.
- Row-wise quantization (int8_vectorwise_quant): the threshold is rounded to float32; when that is > 0, the
  elements with |x| >= threshold (x in float32) are outliers; their columns are reported (outlier_cols: ascending
  int64), they are left out of their row's absmax, and every code of an outlier column is 0 (int8_mixed_scaled_mm
  computes those columns in A's precision).
  A row's codes are round-half-even(x * (127 / absmax)) in float32, 127 / absmax rounded once, clamped to
  [-127, 127]; a row whose absmax is 0 or not finite has codes 0 (its stats then say so on dequantization).
- Column-wise (int8_double_quant's second output): round-half-even((x * 127) / col_absmax), outliers counting as 0,
  codes 0 where the column's absmax is 0 or not finite.
- int8_vectorwise_dequant: codes * stats * (1/127), in float32, rounded after each product.
- int8_linear_matmul: exact int32 dot products (K at most 131071, so no sum can overflow).
- int8_mm_dequant: (int32 * (row_stat * col_stat)) * (1/127^2), plus the bias, in float32, rounded once to the
  output dtype (float16 by default, as bitsandbytes).
- int8_mixed_scaled_mm: int8_scaled_mm in A's dtype, then out.addmm(A's outlier columns, those columns of the weight
  dequantized to A's dtype); subA is A's outlier columns, [rows, len(outlier_cols)] (empty columns when none).
"""

import math
import struct

import torch

from . import checks
from .registry import kernel

INV_127 = 7.874015718698502e-3  # 1 / 127, as the float32 nearest (bitsandbytes' constant)
INV_127_SQUARED = 6.200012285262346e-05  # 1 / 127^2, likewise (bitsandbytes' default backend has 6.200124e-05, a typo)
MAX_K = 131071  # the longest dot product of int8 values that int32 holds: 128 * 128 * 131071 < 2^31
_F32 = torch.float32


def rows_of(A: torch.Tensor) -> torch.Tensor:
    """A as [rows, K] (K may be 0)."""
    return A.reshape(math.prod(A.shape[:-1]), A.shape[-1])


def _check_input(op: str, A: torch.Tensor, threshold: float) -> None:
    checks.float_dtype(op, "A", A.dtype)
    checks.check(A.dim() >= 1, f"bnb::{op}: A must have at least one dimension, got a scalar")
    checks.not_empty(op, "A", A)
    checks.check(threshold >= 0.0, f"bnb::{op}: threshold must be >= 0 (0 finds no outliers), got {threshold}")


def float32(threshold: float) -> float:
    """threshold rounded to float32 (to nearest; inf past the largest float32), as the C++ kernels take it."""
    try:
        return struct.unpack("f", struct.pack("f", threshold))[0]
    except OverflowError:
        return math.inf


def outliers(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """The mask of elements with |x| >= threshold, x float32, threshold float32 already."""
    return x.abs() >= torch.tensor(threshold, dtype=_F32)


def quantize_scaled(x: torch.Tensor, numerator: torch.Tensor, absmax: torch.Tensor) -> torch.Tensor:
    """int8 codes round-half-even(numerator / absmax ...) as the module doc says: `numerator` is x * (127 / absmax)
    or x * 127 already divided; 0 where absmax is 0 or not finite."""
    q = torch.round(numerator).clamp(-127, 127)
    return torch.where(torch.isfinite(absmax) & (absmax > 0), q, 0).to(torch.int8)


def _vectorwise(A: torch.Tensor, threshold: float):
    """(codes [rows, K], row absmax, outlier mask or None, outlier columns or None) of A's rows."""
    x = rows_of(A).to(_F32)
    mask = cols = None
    threshold = float32(threshold)
    if threshold > 0.0:
        mask = outliers(x, threshold)
        cols = mask.any(dim=0).nonzero().view(-1)
        x = x.masked_fill(mask, 0.0)
    absmax = x.abs().amax(dim=1)
    scale = torch.full_like(absmax, 127.0) / absmax
    codes = quantize_scaled(x, x * scale[:, None], absmax[:, None])
    if cols is not None:
        codes[:, cols] = 0
    return codes, absmax, mask, cols


def _quant_example(device, threshold=6.0):
    A = torch.randn(4, 96, generator=torch.Generator().manual_seed(0)).to(device, torch.float16) * 3
    return (A, threshold), {}


def _quant_fake(A: torch.Tensor, threshold: float = 0.0):
    """Meta / fake outputs of int8_vectorwise_quant: the outlier columns' count is the data's (an unbacked size)."""
    _check_input("int8_vectorwise_quant", A, threshold)
    codes, stats = torch.empty_like(A, dtype=torch.int8), A.new_empty(rows_of(A).shape[0], dtype=_F32)
    return codes, stats, _fake_outlier_cols(A, threshold)


def _fake_outlier_cols(A: torch.Tensor, threshold: float):
    if not float32(threshold) > 0.0:
        return None
    return A.new_empty(torch.library.get_ctx().new_dynamic_size(), dtype=torch.int64)


@kernel("int8_vectorwise_quant", differentiable=False, example=_quant_example, fake=_quant_fake)
def int8_vectorwise_quant(A: torch.Tensor, threshold: float = 0.0):
    _check_input("int8_vectorwise_quant", A, threshold)
    codes, absmax, _, cols = _vectorwise(A, threshold)
    return codes.view(A.shape), absmax, cols


def _check_stats(op: str, arg: str, stats: torch.Tensor, A: torch.Tensor, n: int, why: str) -> None:
    checks.float32_tensor(op, arg, stats, A, n, why)


def _dequant_example(device):
    A, _ = _quant_example(device)[0]
    codes, stats, _ = int8_vectorwise_quant(A, 0.0)
    return (codes, stats), {}


@kernel("int8_vectorwise_dequant", differentiable=False, example=_dequant_example)
def int8_vectorwise_dequant(A: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    op = "int8_vectorwise_dequant"
    checks.dtype_is(op, "A", A, torch.int8)
    checks.check(A.dim() >= 1, f"bnb::{op}: A must have at least one dimension, got a scalar")
    rows = rows_of(A)
    _check_stats(op, "stats", stats, A, rows.shape[0], "one per row of A")
    out = (rows.to(_F32) * stats.reshape(-1, 1)) * torch.tensor(INV_127, dtype=_F32)
    return out.view(A.shape)


def _check_matmul(op: str, A: torch.Tensor, B: torch.Tensor) -> list:
    """int8_linear_matmul's checks; returns the output shape."""
    checks.dtype_is(op, "A", A, torch.int8)
    checks.dtype_is(op, "B", B, torch.int8)
    checks.check(A.dim() >= 1, f"bnb::{op}: A must have at least one dimension, got a scalar")
    checks.check(B.dim() == 2, f"bnb::{op}: B must be [N, K], got shape {list(B.shape)}")
    checks.check(A.shape[-1] == B.shape[1], f"bnb::{op}: A has {A.shape[-1]} columns but B {list(B.shape)} has "
                                            f"{B.shape[1]}; B must be [N, K] with K = A's last dimension")
    checks.check(A.shape[-1] <= MAX_K, f"bnb::{op}: K = {A.shape[-1]} is too long for int32 sums (at most {MAX_K})")
    checks.same_device(op, "B", B, A)
    return [*A.shape[:-1], B.shape[0]]


_EXACT_K = 1024  # float32 sums of int8 products are exact over this many terms: 1024 * 128 * 128 = 2^24


def _int_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    # Float32 matmuls over slices of K, added in int32: exact on any device (CUDA has no int64 matmul). Every int8
    # value is exact in float32, TF32 and bfloat16 alike, and no partial sum of a slice passes 2^24 in magnitude, so no
    # summation order or reduced-precision mode rounds; every total fits int32 (MAX_K).
    A, B = rows_of(A), B.t()
    out = torch.zeros(A.shape[0], B.shape[1], dtype=torch.int32, device=A.device)
    for k in range(0, A.shape[1], _EXACT_K):
        out += (A[:, k:k + _EXACT_K].to(_F32) @ B[k:k + _EXACT_K].to(_F32)).to(torch.int32)
    return out


def _matmul_example(device, out: bool = False):
    g = torch.Generator().manual_seed(0)
    A = torch.randint(-127, 128, (5, 96), generator=g, dtype=torch.int8).to(device)
    B = torch.randint(-127, 128, (64, 96), generator=g, dtype=torch.int8).to(device)
    return (A, B), ({"out": torch.empty(5, 64, dtype=torch.int32, device=device)} if out else {})


@kernel("int8_linear_matmul", differentiable=False, example=_matmul_example)
def int8_linear_matmul(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    shape = _check_matmul("int8_linear_matmul", A, B)
    return _int_product(A, B).view(shape)


@kernel("int8_linear_matmul.out", differentiable=False, example=lambda d: _matmul_example(d, out=True))
def int8_linear_matmul_out(A: torch.Tensor, B: torch.Tensor, out: torch.Tensor) -> None:
    op = "int8_linear_matmul.out"
    shape = _check_matmul(op, A, B)
    checks.out(op, out, shape, "shape", torch.int32, A)
    out.copy_(_int_product(A, B).view(shape))


def _check_dequant_args(op: str, like: torch.Tensor, rows: int, n: int, row_stats: torch.Tensor,
                        col_stats: torch.Tensor, dtype, bias) -> torch.dtype:
    """Checks of the stats, dtype and bias that dequantize a [rows, n] int32 product on like's device; returns the
    output dtype."""
    _check_stats(op, "row_stats", row_stats, like, rows, "one per row of A")
    _check_stats(op, "col_stats", col_stats, like, n, "one per output column")
    dtype = torch.float16 if dtype is None else dtype
    checks.float_dtype(op, "dtype", dtype)
    if bias is not None:
        checks.float_dtype(op, "bias", bias.dtype)
        checks.check(bias.dim() == 1 and bias.shape[0] == n,
                     f"bnb::{op}: bias must be a vector of {n} values, got shape {list(bias.shape)}")
        checks.same_device(op, "bias", bias, like)
    return dtype


def _dequantize_product(A, row_stats, col_stats, dtype, bias) -> torch.Tensor:
    x = rows_of(A).to(_F32)
    scale = row_stats.reshape(-1, 1) * col_stats.reshape(1, -1)
    out = (x * scale) * torch.tensor(INV_127_SQUARED, dtype=_F32)
    if bias is not None:
        out = out + bias.to(_F32)
    return out.to(dtype).view(A.shape)


def _mm_dequant_example(device):
    (A, B), _ = _matmul_example(device)
    g = torch.Generator().manual_seed(1)
    rows, cols, bias = torch.rand(5, generator=g) * 4, torch.rand(64, generator=g) * 4, torch.randn(64, generator=g)
    return (int8_linear_matmul(A, B), rows.to(device), cols.to(device)), {"bias": bias.to(device)}


@kernel("int8_mm_dequant", differentiable=False, example=_mm_dequant_example)
def int8_mm_dequant(A: torch.Tensor, row_stats: torch.Tensor, col_stats: torch.Tensor, dtype=None,
                    bias=None) -> torch.Tensor:
    op = "int8_mm_dequant"
    checks.dtype_is(op, "A", A, torch.int32)
    checks.check(A.dim() >= 1, f"bnb::{op}: A must have at least one dimension, got a scalar")
    rows, n = rows_of(A).shape
    dtype = _check_dequant_args(op, A, rows, n, row_stats, col_stats, dtype, bias)
    return _dequantize_product(A, row_stats, col_stats, dtype, bias)


def _scaled_mm_example(device):
    (A, B), _ = _matmul_example(device)
    (_, rows, cols), kw = _mm_dequant_example(device)
    return (A, B, rows, cols), {**kw, "dtype": torch.bfloat16}


@kernel("int8_scaled_mm", differentiable=False, example=_scaled_mm_example)
def int8_scaled_mm(A: torch.Tensor, B: torch.Tensor, row_stats: torch.Tensor, col_stats: torch.Tensor, bias=None,
                   dtype=None) -> torch.Tensor:
    op = "int8_scaled_mm"
    shape = _check_matmul(op, A, B)
    dtype = _check_dequant_args(op, A, rows_of(A).shape[0], B.shape[0], row_stats, col_stats, dtype, bias)
    return _dequantize_product(_int_product(A, B).view(shape), row_stats, col_stats, dtype, bias)


def _double_quant_fake(A: torch.Tensor, threshold: float = 0.0):
    _check_input("int8_double_quant", A, threshold)
    rows, K = rows_of(A).shape
    codes = torch.empty_like(A, dtype=torch.int8)
    return (codes, torch.empty_like(codes), A.new_empty(rows, dtype=_F32), A.new_empty(K, dtype=_F32),
            _fake_outlier_cols(A, threshold))


@kernel("int8_double_quant", differentiable=False, example=_quant_example, fake=_double_quant_fake)
def int8_double_quant(A: torch.Tensor, threshold: float = 0.0):
    _check_input("int8_double_quant", A, threshold)
    row_codes, row_stats, mask, cols = _vectorwise(A, threshold)
    x = rows_of(A).to(_F32)
    if mask is not None:
        x = x.masked_fill(mask, 0.0)
    col_stats = x.abs().amax(dim=0)
    col_codes = quantize_scaled(x, (x * 127.0) / col_stats, col_stats)
    return row_codes.view(A.shape), col_codes.view(A.shape), row_stats, col_stats, cols


def _mixed_example(device):
    (A, _), _ = _quant_example(device)
    W = torch.randn(64, 96, generator=torch.Generator().manual_seed(2)).to(device, torch.float16)
    CA, SCA, cols = int8_vectorwise_quant(A, 6.0)
    CB, SCB, _ = int8_vectorwise_quant(W, 0.0)
    bias = torch.randn(64, generator=torch.Generator().manual_seed(3))
    return (A, CA, CB, SCA, SCB, cols), {"bias": bias.to(device, torch.float16)}


@kernel("int8_mixed_scaled_mm", differentiable=False, example=_mixed_example)
def int8_mixed_scaled_mm(A: torch.Tensor, CA: torch.Tensor, CB: torch.Tensor, SCA: torch.Tensor, SCB: torch.Tensor,
                         outlier_cols=None, bias=None):
    op = "int8_mixed_scaled_mm"
    checks.float_dtype(op, "A", A.dtype)
    checks.check(A.shape == CA.shape, f"bnb::{op}: CA must have A's shape {list(A.shape)}, got {list(CA.shape)}")
    shape = _check_matmul(op, CA, CB)
    _check_dequant_args(op, A, rows_of(A).shape[0], CB.shape[0], SCA, SCB, A.dtype, bias)
    cols = _check_outlier_cols(op, outlier_cols, A)
    out = _dequantize_product(_int_product(CA, CB).view(shape), SCA, SCB, A.dtype, bias)
    subA = rows_of(A)[:, cols]
    subB = int8_vectorwise_dequant(CB[:, cols], SCB).to(A.dtype).t()
    return rows_of(out).addmm(subA, subB).view(shape), subA


def _check_outlier_cols(op: str, outlier_cols, A: torch.Tensor) -> torch.Tensor:
    """The outlier column indices (none: an empty vector), checked: int64, a vector, each in [0, K)."""
    if outlier_cols is None:
        return torch.empty(0, dtype=torch.int64, device=A.device)
    checks.dtype_is(op, "outlier_cols", outlier_cols, torch.int64)
    checks.check(outlier_cols.dim() == 1, f"bnb::{op}: outlier_cols must be a vector of column indices, got "
                                          f"shape {list(outlier_cols.shape)}")
    checks.same_device(op, "outlier_cols", outlier_cols, A)
    K = A.shape[-1]
    checks.check(not ((outlier_cols < 0) | (outlier_cols >= K)).any().item(),
                 f"bnb::{op}: outlier_cols holds an index outside [0, {K})")
    return outlier_cols
