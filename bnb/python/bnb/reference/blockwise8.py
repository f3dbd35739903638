"""Blockwise 8-bit quantization in plain torch: the definition of bnb/core/blockwise8.h, element for element.

Per block: absmax = max |x| (NaN if the block holds NaN); v = x / absmax (0 when absmax is 0, +-1 for +-inf);
the code is that of the nearest codebook value (an exact tie goes to the lower value, equal values to the lowest
code, NaN to the lowest value), found by the splits between sorted neighbours (split_points).
"""

import torch

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(cond: bool, msg: str) -> None:
    # RuntimeError, as the C++ kernels' TORCH_CHECK raises: an op fails the same way on every device.
    if not cond:
        raise RuntimeError(msg)


# The 8-bit ops take blocks up to 2^30 values here, as on the CPU (bnb::core::kMaxCpuBlocksize8); the 4-bit ones 4096.
MAX_BLOCKSIZE_8BIT = 1 << 30


def _check_blocksize(op: str, blocksize: int, largest: int = 4096) -> None:
    _check(32 <= blocksize <= largest and blocksize & (blocksize - 1) == 0,
           f"bnb::{op}: blocksize must be a power of two in [32, {largest}], got {blocksize}")


def _check_code(op: str, code: torch.Tensor) -> None:
    _check(code.dtype == torch.float32 and code.numel() == 256,
           f"bnb::{op}: code must hold 256 float32 values, got {code.numel()} {code.dtype}")


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
    """uint8 codes of the scaled float32 values v (any shape) in the codebook `code` (256 or 16 entries)."""
    values, order = torch.sort(code.float(), stable=True)
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


def quantize_blockwise(A: torch.Tensor, code: torch.Tensor, blocksize: int) -> tuple[torch.Tensor, torch.Tensor]:
    _check(A.dtype in _FLOATS, f"bnb::quantize_blockwise: A must be float32, float16 or bfloat16, got {A.dtype}")
    _check_blocksize("quantize_blockwise", blocksize, MAX_BLOCKSIZE_8BIT)
    _check(A.numel() > 0, f"bnb::quantize_blockwise: A is empty (shape {list(A.shape)})")
    _check_code("quantize_blockwise", code)
    v, absmax = scale_blocks(A, blocksize)
    return nearest_code(v, code.to(A.device)).view(A.shape), absmax


def quantize_blockwise_into(A: torch.Tensor, code: torch.Tensor, blocksize: int, out: torch.Tensor,
                           absmax: torch.Tensor) -> None:
    codes, am = quantize_blockwise(A, code, blocksize)
    _check(out.shape == A.shape and out.dtype == torch.uint8,
           f"bnb::quantize_blockwise_into: out must be uint8 of shape {list(A.shape)}, got {out.dtype} "
           f"{list(out.shape)}")
    _check(absmax.numel() == am.numel() and absmax.dtype == torch.float32,
           f"bnb::quantize_blockwise_into: absmax must be float32 with {am.numel()} values (one per block of A), "
           f"got {absmax.dtype} with {absmax.numel()}")
    out.copy_(codes)
    absmax.copy_(am.view(absmax.shape))


def dequantize_blockwise(A: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int,
                         dtype: torch.dtype) -> torch.Tensor:
    _check(A.dtype == torch.uint8, f"bnb::dequantize_blockwise: A must be uint8, got {A.dtype}")
    _check(dtype in _FLOATS, f"bnb::dequantize_blockwise: dtype must be float32, float16 or bfloat16, got {dtype}")
    _check_blocksize("dequantize_blockwise", blocksize, MAX_BLOCKSIZE_8BIT)
    _check_code("dequantize_blockwise", code)
    n = A.numel()
    _check(absmax.numel() == -(-n // blocksize),
           f"bnb::dequantize_blockwise: absmax must hold {-(-n // blocksize)} values, got {absmax.numel()}")
    values = code.float().to(A.device)[A.reshape(-1).long()]
    return times_block_absmax(values, absmax, blocksize).to(dtype).view(A.shape)


def dequantize_blockwise_out(A: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int,
                             dtype: torch.dtype, out: torch.Tensor) -> None:
    _check(out.shape == A.shape and out.dtype == dtype,
           f"bnb::dequantize_blockwise.out: out must be {dtype} of shape {list(A.shape)}, got {out.dtype} "
           f"{list(out.shape)}")
    out.copy_(dequantize_blockwise(A, absmax, code, blocksize, dtype))
