"""Blockwise 8-bit quantization in plain torch: the definition of bnb/core/blockwise8.h, element for element.

Per block: absmax = max |x| (NaN if the block holds NaN); v = x / absmax (0 when absmax is 0, +-1 for +-inf);
the code is that of the nearest codebook value (an exact tie goes to the lower value, equal values to the lowest
code, NaN to the lowest value), found by the splits between sorted neighbours (split_points).
"""

import torch

from . import checks
from .registry import kernel


def _check_code(op: str, code: torch.Tensor, A: torch.Tensor) -> None:
    """A codebook as the C++ kernels take it: 256 float32 values of any shape, on A's device, all finite."""
    checks.float32_tensor(op, "code", code, A, 256, "one value per 8-bit code")
    checks.finite_code(op, code)


def _check_absmax(op: str, absmax: torch.Tensor, A: torch.Tensor, blocksize: int) -> None:
    checks.float32_tensor(op, "absmax", absmax, A, checks.num_blocks(A.numel(), blocksize), "one per block of A")


def split_points(values: torch.Tensor) -> torch.Tensor:
    """bnb::core::SplitPoint of each pair of neighbours in the ascending float32 values: the largest float t such
    that every v <= t is at least as near the lower value, so v takes the upper one exactly when v > t. That is the
    rounded midpoint (lo + hi) * 0.5, or the float below it where the rounding went above the true midpoint; lo + hi
    == s + err exactly (TwoSum), and (m - s) + m is 2m - s exactly."""
    lo, hi = values[:-1], values[1:]
    s = lo + hi
    m = s * 0.5
    hi_part = s - lo
    err = (lo - (s - hi_part)) + (hi - hi_part)
    above = torch.isfinite(s) & ((m - s) + m > err)
    return torch.where(above, torch.nextafter(m, torch.full_like(m, -torch.inf)), m)


def nearest_code(v: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """uint8 codes of the scaled float32 values v (any shape) in the codebook `code` (256 or 16 entries, any shape)."""
    values, order = torch.sort(code.float().reshape(-1), stable=True)
    first_of_run = torch.searchsorted(values, values)  # equal values share the first position of their run
    lowest_code = order[first_of_run]
    pos = torch.searchsorted(split_points(values), v.contiguous(), right=False)  # number of splits strictly below v
    pos = torch.where(torch.isnan(v), 0, pos)
    return lowest_code[pos].to(torch.uint8)


def scale_blocks(A: torch.Tensor, blocksize: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(v, absmax): the flat float32 values scaled by their block's absmax, and the absmax per block."""
    n = A.numel()
    blocks = -(-n // blocksize)
    x = torch.nn.functional.pad(A.reshape(-1).float(), (0, blocks * blocksize - n)).view(blocks, blocksize)
    absmax = x.abs().amax(dim=1)  # propagates NaN
    scale = absmax[:, None]
    v = torch.where(scale == 0, 0.0, x / scale)
    v = torch.where(torch.isinf(x), torch.sign(x), v)
    return v.reshape(-1)[:n], absmax


def times_block_absmax(values: torch.Tensor, absmax: torch.Tensor, blocksize: int) -> torch.Tensor:
    """The n float32 `values` each times its block's absmax (one float32 rounding). Padded to whole blocks and
    broadcast, not repeat_interleave'd: inductor miscompiled repeat_interleave(...)[:n] for a partial last block
    (values off by 1e30 in a compiled backward)."""
    n = values.numel()
    blocks = absmax.numel()
    padded = torch.nn.functional.pad(values.reshape(-1), (0, blocks * blocksize - n))
    return (padded.view(blocks, blocksize) * absmax.float().reshape(blocks, 1)).reshape(-1)[:n]


def _check_quantize(op: str, A: torch.Tensor, code: torch.Tensor, blocksize: int) -> None:
    checks.float_dtype(op, "A", A.dtype)
    checks.blocksize(op, blocksize, checks.MAX_BLOCKSIZE_8BIT)
    checks.not_empty(op, "A", A)
    _check_code(op, code, A)


def _example_inputs(device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A small float32 tensor, a codebook, and A's codes and absmax at blocksize 64 (the ops' examples)."""
    A = torch.randn(3, 100, generator=torch.Generator().manual_seed(0)).to(device)
    code = torch.linspace(-1, 1, 256).to(device)
    q, absmax = quantize_blockwise(A, code, 64)
    return A, code, q, absmax


@kernel("quantize_blockwise", differentiable=False, example=lambda d: (_example_inputs(d)[:2] + (64,), {}))
def quantize_blockwise(A: torch.Tensor, code: torch.Tensor, blocksize: int) -> tuple[torch.Tensor, torch.Tensor]:
    _check_quantize("quantize_blockwise", A, code, blocksize)
    v, absmax = scale_blocks(A, blocksize)
    return nearest_code(v, code).view(A.shape), absmax


def _quantize_into_example(device):
    A, code, q, absmax = _example_inputs(device)
    return (A, code, 64, torch.empty_like(q), torch.empty_like(absmax)), {}


@kernel("quantize_blockwise_into", differentiable=False, example=_quantize_into_example)
def quantize_blockwise_into(A: torch.Tensor, code: torch.Tensor, blocksize: int, out: torch.Tensor,
                            absmax: torch.Tensor) -> None:
    op = "quantize_blockwise_into"
    _check_quantize(op, A, code, blocksize)
    checks.out(op, out, A.shape, "A's shape", torch.uint8, A)
    _check_absmax(op, absmax, A, blocksize)
    checks.writable(op, "absmax", absmax)
    checks.separate_outs(op, out, absmax)
    codes, am = quantize_blockwise(A, code, blocksize)
    out.copy_(codes)
    absmax.copy_(am.view(absmax.shape))


def _check_dequantize(op: str, A: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int,
                      dtype: torch.dtype) -> None:
    checks.float_dtype(op, "dtype", dtype)
    checks.dtype_is(op, "A", A, torch.uint8)
    checks.blocksize(op, blocksize, checks.MAX_BLOCKSIZE_8BIT)
    checks.not_empty(op, "A", A)
    _check_absmax(op, absmax, A, blocksize)
    _check_code(op, code, A)


def _dequantize_example(device, out: bool = False):
    A, code, q, absmax = _example_inputs(device)
    return (q, absmax, code, 64, torch.bfloat16), ({"out": torch.empty(A.shape, dtype=torch.bfloat16,
                                                                      device=device)} if out else {})


@kernel("dequantize_blockwise", differentiable=False, example=_dequantize_example)
def dequantize_blockwise(A: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int,
                         dtype: torch.dtype) -> torch.Tensor:
    _check_dequantize("dequantize_blockwise", A, absmax, code, blocksize, dtype)
    return dequantize_codes(A, absmax, code, blocksize, dtype)


def dequantize_codes(A: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int,
                     dtype: torch.dtype) -> torch.Tensor:
    """dequantize_blockwise's values, for arguments already checked."""
    values = code.float().reshape(-1)[A.reshape(-1).long()]
    return times_block_absmax(values, absmax, blocksize).to(dtype).view(A.shape)


@kernel("dequantize_blockwise.out", differentiable=False, example=lambda d: _dequantize_example(d, out=True))
def dequantize_blockwise_out(A: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int,
                             dtype: torch.dtype, out: torch.Tensor) -> None:
    op = "dequantize_blockwise.out"
    _check_dequantize(op, A, absmax, code, blocksize, dtype)
    checks.out(op, out, A.shape, "A's shape", dtype, A)
    out.copy_(dequantize_codes(A, absmax, code, blocksize, dtype))
