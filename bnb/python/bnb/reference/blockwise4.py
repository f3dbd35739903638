"""4-bit NF4/FP4 quantization in plain torch: the definition bnb/core/blockwise4 implements element for element.

Blocks scale exactly as in 8-bit (see blockwise8.py); each scaled value takes the code of the nearest of the 16
values (blockwise8.nearest_code: exact ties to the lower value, equal values to the lowest code); two codes share a
byte, the even-indexed element in the high nibble; the bytes are viewed as `quant_storage`.
"""

import math

import torch

from . import checks
from .registry import kernel
from .blockwise8 import dequantize_codes, nearest_code, scale_blocks, times_block_absmax

# bitsandbytes' code values (get_4bit_type): NF4 as published, FP4 as 16 values divided by their maximum, 12.
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
FP4_UNSCALED = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]


def _check_quant_type(op: str, quant_type: str) -> None:
    checks.check(quant_type in ("nf4", "fp4"), f"bnb::{op}: quant_type must be 'nf4' or 'fp4', got '{quant_type}'")


def code4(quant_type: str, device=None) -> torch.Tensor:
    checks.check(quant_type in ("nf4", "fp4"), f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}")
    if quant_type == "nf4":
        return torch.tensor(NF4, dtype=torch.float32, device=device)
    return torch.tensor(FP4_UNSCALED, dtype=torch.float32, device=device) / 12.0


def _packed_elements(op: str, n: int, quant_storage: torch.dtype) -> int:
    checks.storage(op, "quant_storage", quant_storage)
    nbytes = (n + 1) // 2
    itemsize = torch.empty(0, dtype=quant_storage).element_size()
    checks.check(nbytes % itemsize == 0,
                 f"bnb::{op}: {n} values pack into {nbytes} bytes, not a whole number of "
                 f"{checks.dtype_name(quant_storage)} ({itemsize} bytes each); use uint8 storage or a size that "
                 "divides")
    return nbytes // itemsize


def _check_absmax(op: str, absmax: torch.Tensor, A: torch.Tensor, n: int, blocksize: int) -> None:
    checks.float32_tensor(op, "absmax", absmax, A, checks.num_blocks(n, blocksize), "one per block")


def _weight_example(device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A small [64, 96] bfloat16 weight, its NF4 codes and absmax at blocksize 64 (the ops' examples)."""
    W = torch.randn(64, 96, generator=torch.Generator().manual_seed(0)).to(device, torch.bfloat16)
    packed, absmax = quantize_4bit(W, 64, "nf4", torch.uint8)
    return W, packed, absmax


@kernel("quantize_4bit", differentiable=False, example=lambda d: ((_weight_example(d)[0], 64, "nf4", torch.uint8), {}))
def quantize_4bit(A: torch.Tensor, blocksize: int, quant_type: str,
                  quant_storage: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    op = "quantize_4bit"
    checks.float_dtype(op, "A", A.dtype)
    checks.blocksize(op, blocksize)
    _check_quant_type(op, quant_type)
    checks.not_empty(op, "A", A)
    n = A.numel()
    nbytes = (n + 1) // 2
    _packed_elements(op, n, quant_storage)
    v, absmax = scale_blocks(A, blocksize)
    code = code4(quant_type, A.device)
    codes = nearest_code(v, code)
    # An odd count's last low nibble: the code of 0.0, as bitsandbytes' CUDA kernel quantizes the missing element.
    codes = torch.cat([codes, nearest_code(torch.zeros(2 * nbytes - n, device=A.device), code)])
    packed = (codes[0::2] << 4) | codes[1::2]
    return packed.view(quant_storage).view(-1, 1), absmax


def _quantize_into_example(device):
    W, packed, absmax = _weight_example(device)
    return (W, 64, "nf4", torch.empty_like(packed), torch.empty_like(absmax)), {}


@kernel("quantize_4bit_into", differentiable=False, example=_quantize_into_example)
def quantize_4bit_into(A: torch.Tensor, blocksize: int, quant_type: str, out: torch.Tensor,
                       absmax: torch.Tensor) -> None:
    """quantize_4bit into existing tensors: out of its packed shape with out's dtype as quant_storage."""
    op = "quantize_4bit_into"
    checks.float_dtype(op, "A", A.dtype)
    checks.blocksize(op, blocksize)
    _check_quant_type(op, quant_type)
    checks.not_empty(op, "A", A)
    checks.storage(op, "out's dtype", out.dtype)
    rows = _packed_elements(op, A.numel(), out.dtype)
    checks.out(op, out, (rows, 1), "quantize_4bit's packed shape for its dtype", out.dtype, A)
    _check_absmax(op, absmax, A, A.numel(), blocksize)
    checks.writable(op, "absmax", absmax)
    checks.separate_outs(op, out, absmax)
    packed, am = quantize_4bit(A, blocksize, quant_type, out.dtype)
    out.copy_(packed)
    absmax.copy_(am.view(absmax.shape))


def unpack_codes(A: torch.Tensor, n: int) -> torch.Tensor:
    """The n 4-bit codes (int64) stored in A's bytes, high nibble first."""
    b = A.contiguous().view(torch.uint8).reshape(-1)
    return torch.stack([b >> 4, b & 0xF], dim=1).reshape(-1)[:n].long()


def _check_dequantize(op, A, absmax, blocksize, quant_type, shape, dtype) -> int:
    checks.float_dtype(op, "dtype", dtype)
    checks.blocksize(op, blocksize)
    _check_quant_type(op, quant_type)
    n = checks.shape_numel(op, "shape", shape)
    checks.packed_bytes(op, "A", A, n)
    _check_absmax(op, absmax, A, n, blocksize)
    return n


def _dequantize_example(device, out: bool = False):
    _, packed, absmax = _weight_example(device)
    return ((packed, absmax, 64, "nf4", [64, 96], torch.bfloat16),
            {"out": torch.empty(64, 96, dtype=torch.bfloat16, device=device)} if out else {})


@kernel("dequantize_4bit", differentiable=False, example=_dequantize_example)
def dequantize_4bit(A: torch.Tensor, absmax: torch.Tensor, blocksize: int, quant_type: str, shape,
                    dtype: torch.dtype) -> torch.Tensor:
    _check_dequantize("dequantize_4bit", A, absmax, blocksize, quant_type, shape, dtype)
    return dequantize_with_code(A, absmax, code4(quant_type, A.device), blocksize, shape, dtype)


def dequantize_with_code(A, absmax, code, blocksize, shape, dtype):
    """The weight of `shape` from packed codes with the 16 values `code` (any shape), for arguments already checked
    (the gradient of gemv_4bit uses it too)."""
    values = code.float().reshape(-1)[unpack_codes(A, math.prod(shape))]
    return times_block_absmax(values, absmax, blocksize).to(dtype).reshape(shape)


@kernel("dequantize_4bit.out", differentiable=False, example=lambda d: _dequantize_example(d, out=True))
def dequantize_4bit_out(A, absmax, blocksize, quant_type, shape, dtype, out) -> None:
    op = "dequantize_4bit.out"
    _check_dequantize(op, A, absmax, blocksize, quant_type, shape, dtype)
    checks.out(op, out, shape, "shape", dtype, A)
    out.copy_(dequantize_with_code(A, absmax, code4(quant_type, A.device), blocksize, shape, dtype))


def _check_scales(op, n, blocksize, absmax, absmax_8bit, absmax_code, absmax_offset, A) -> None:
    """absmax and the nested statistics of a 4-bit tensor of n elements (gemv_4bit, gemm_4bit)."""
    checks.dtype_is(op, "absmax", absmax, torch.float32)
    checks.same_device(op, "absmax", absmax, A)
    for name, t in (("absmax_8bit", absmax_8bit), ("absmax_code", absmax_code), ("absmax_offset", absmax_offset)):
        if t is not None:
            checks.same_device(op, name, t, A)
    blocks = checks.num_blocks(n, blocksize)
    if absmax_8bit is not None:
        # Nested statistics: the per-block scales are 8-bit codes (blocksize 256) of absmax_code, plus the offset.
        checks.check(absmax_code is not None and absmax_offset is not None,
                     f"bnb::{op}: absmax_8bit needs absmax_code and absmax_offset too")
        checks.dtype_is(op, "absmax_8bit", absmax_8bit, torch.uint8)
        checks.numel_is(op, "absmax_8bit", absmax_8bit, blocks, "one per block of B")
        checks.numel_is(op, "absmax", absmax, checks.num_blocks(blocks, 256), "one per 256 entries of absmax_8bit")
        checks.float32_tensor(op, "absmax_code", absmax_code, A, 256, "one value per 8-bit code")
        checks.check(absmax_offset.numel() == 1, f"bnb::{op}: absmax_offset must be one value, got shape "
                                                 f"{list(absmax_offset.shape)}")
    else:
        checks.check(absmax_code is None and absmax_offset is None,
                     f"bnb::{op}: absmax_code and absmax_offset describe nested statistics and go with absmax_8bit, "
                     "which is missing")
        checks.numel_is(op, "absmax", absmax, blocks, "one per block of B")


def _scales(op, absmax, absmax_8bit, absmax_code, absmax_offset) -> torch.Tensor:
    """The float32 scale of each block: absmax, or the nested statistics dequantized (code * scale, then + offset,
    each rounded to float32, as the kernels compute them)."""
    if absmax_8bit is None:
        return absmax
    checks.finite_code(op, absmax_code, "absmax_code: ")
    return (dequantize_codes(absmax_8bit, absmax, absmax_code, 256, torch.float32)
            + absmax_offset.to(torch.float32).reshape(()))


def _check_gemv(op, A, B, shapeB, absmax, code, blocksize, absmax_8bit=None, absmax_code=None,
                absmax_offset=None) -> list:
    """gemv_4bit's checks; returns the output shape."""
    checks.float_dtype(op, "A", A.dtype)
    checks.check(A.dim() >= 1 and A.numel() == A.shape[-1], f"bnb::{op}: A must be a single row (leading "
                                                             f"dimensions of 1), got shape {list(A.shape)}")
    checks.check(len(shapeB) == 2 and shapeB[0] > 0 and shapeB[1] > 0,
                 f"bnb::{op}: shapeB must be [N, K] with N, K > 0, got {list(shapeB)}")
    checks.check(A.shape[-1] == shapeB[1], f"bnb::{op}: A has {A.shape[-1]} columns but shapeB {list(shapeB)} "
                                           f"needs {shapeB[1]}")
    checks.blocksize(op, blocksize)
    n = checks.checked_numel(op, "shapeB", shapeB)
    checks.packed_bytes(op, "B", B, n)
    checks.same_device(op, "B", B, A)
    _check_scales(op, n, blocksize, absmax, absmax_8bit, absmax_code, absmax_offset, A)
    checks.float32_tensor(op, "code", code, A, 16, "the 16 values of the 4-bit type")
    return [*A.shape[:-1], shapeB[0]]


def _gemv(A, B, shapeB, absmax, code, blocksize) -> torch.Tensor:
    W = dequantize_with_code(B, absmax, code, blocksize, shapeB, torch.float32)
    return (A.float() @ W.t()).to(A.dtype)


def _gemv_example(device, out: bool = False):
    _, packed, absmax = _weight_example(device)
    A = torch.randn(1, 96, generator=torch.Generator().manual_seed(1)).to(device, torch.bfloat16)
    return ((A, packed, [64, 96], absmax, code4("nf4", device), 64),
            {"out": torch.empty(1, 64, dtype=torch.bfloat16, device=device)} if out else {})


@kernel("gemv_4bit", differentiable=True, example=_gemv_example)
def gemv_4bit(A, B, shapeB, absmax, code, blocksize, absmax_8bit=None, absmax_code=None,
              absmax_offset=None) -> torch.Tensor:
    op = "gemv_4bit"
    _check_gemv(op, A, B, shapeB, absmax, code, blocksize, absmax_8bit, absmax_code, absmax_offset)
    return _gemv(A, B, shapeB, _scales(op, absmax, absmax_8bit, absmax_code, absmax_offset), code, blocksize)


@kernel("gemv_4bit.out", differentiable=False, example=lambda d: _gemv_example(d, out=True))
def gemv_4bit_out(A, B, shapeB, absmax, code, blocksize, absmax_8bit=None, absmax_code=None, absmax_offset=None, *,
                  out) -> None:
    op = "gemv_4bit.out"
    shape = _check_gemv(op, A, B, shapeB, absmax, code, blocksize, absmax_8bit, absmax_code, absmax_offset)
    checks.out(op, out, shape, "shape", A.dtype, A)
    out.copy_(_gemv(A, B, shapeB, _scales(op, absmax, absmax_8bit, absmax_code, absmax_offset), code, blocksize))


def _gemm_example(device):
    _, packed, absmax = _weight_example(device)
    A = torch.randn(3, 96, generator=torch.Generator().manual_seed(1)).to(device, torch.bfloat16)
    return (A, packed, [64, 96], absmax, 64, "nf4"), {"bias": torch.ones(64, dtype=torch.bfloat16, device=device)}


@kernel("gemm_4bit", differentiable=True, example=_gemm_example)
def gemm_4bit(A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None, absmax_code=None,
              absmax_offset=None) -> torch.Tensor:
    op = "gemm_4bit"
    checks.float_dtype(op, "A", A.dtype)
    checks.check(len(shapeB) == 2, f"bnb::{op}: shapeB must be [N, K], got {list(shapeB)}")
    checks.check(A.dim() >= 1 and A.shape[-1] == shapeB[1], f"bnb::{op}: A's last dimension ({list(A.shape)}) "
                                                            f"must equal shapeB[1] = {shapeB[1]}")
    checks.blocksize(op, blocksize)
    _check_quant_type(op, quant_type)
    n = checks.shape_numel(op, "shapeB", shapeB)
    checks.packed_bytes(op, "B", B, n)
    checks.same_device(op, "B", B, A)
    if bias is not None:
        checks.same_device(op, "bias", bias, A)
    _check_scales(op, n, blocksize, absmax, absmax_8bit, absmax_code, absmax_offset, A)
    if bias is not None:
        checks.check(bias.dim() == 1 and bias.numel() == shapeB[0], f"bnb::{op}: bias must be a vector of "
                                                                    f"{shapeB[0]} values, got shape {list(bias.shape)}")
        checks.dtype_is(op, "bias", bias, A.dtype)  # as F.linear: no silent conversion
    absmax = _scales(op, absmax, absmax_8bit, absmax_code, absmax_offset)
    W = dequantize_with_code(B, absmax, code4(quant_type, A.device), blocksize, shapeB, A.dtype)
    return torch.nn.functional.linear(A, W, bias)


# The CPU layout of a 4-bit weight (bnb/core/gemm4_packed.h): rows in tiles of 16, columns in groups of 64; column
# 64g + 32h + 2p + e of tile t's row j is nibble h (0: low) of byte ((t * K/64 + g) * 16 + p) * 32 + 2j + e, and
# block c of that row is scale (t * K/blocksize + c) * 16 + j. Written here by each element's position.
PACK_ROWS, PACK_COLS = 16, 64


def _check_packed_shape(op, shapeB, blocksize) -> tuple[int, int]:
    checks.check(len(shapeB) == 2 and shapeB[0] > 0 and shapeB[1] > 0,
                 f"bnb::{op}: shapeB must be [N, K] with N, K > 0, got {list(shapeB)}")
    checks.blocksize(op, blocksize)
    N, K = shapeB
    checks.check(K % PACK_COLS == 0 and blocksize >= PACK_COLS and K % blocksize == 0,
                 f"bnb::{op}: the packed layout takes K ({K}) a multiple of {PACK_COLS} and of blocksize, and "
                 f"blocksize >= {PACK_COLS}; got shapeB {list(shapeB)}, blocksize {blocksize}")
    return N, K


def _packed_positions(N, K, blocksize, device):
    """For W's element (n, k): its byte and nibble in the layout's codes, and its block's index in its scales."""
    n = torch.arange(N, device=device).view(N, 1)
    k = torch.arange(K, device=device).view(1, K)
    t, j = n // PACK_ROWS, n % PACK_ROWS
    g, c = k // PACK_COLS, k % PACK_COLS
    h, p, e = c // 32, (c % 32) // 2, c % 2
    byte = ((t * (K // PACK_COLS) + g) * 16 + p) * 32 + 2 * j + e
    scale = (t * (K // blocksize) + k // blocksize) * PACK_ROWS + j
    return byte, h, scale


def _pack_example(device):
    _, packed, absmax = _weight_example(device)  # [64, 96] read as [32, 192]: the same codes, K a multiple of 64
    return (packed, [32, 192], absmax, 64), {}


@kernel("pack_4bit", differentiable=False, example=_pack_example)
def pack_4bit(B, shapeB, absmax, blocksize) -> tuple[torch.Tensor, torch.Tensor]:
    op = "pack_4bit"
    N, K = _check_packed_shape(op, shapeB, blocksize)
    checks.packed_bytes(op, "B", B, N * K)
    checks.dtype_is(op, "absmax", absmax, torch.float32)
    checks.numel_is(op, "absmax", absmax, N * K // blocksize, "one scale per block (nested statistics dequantized "
                    "first)")
    checks.same_device(op, "absmax", absmax, B, "B")
    tiles = (N + PACK_ROWS - 1) // PACK_ROWS
    values = unpack_codes(B, N * K).view(N, K)
    byte, h, scale = _packed_positions(N, K, blocksize, B.device)
    codes = torch.zeros(tiles * PACK_ROWS * K // 2, dtype=torch.int64, device=B.device)
    codes.scatter_add_(0, byte.reshape(-1), (values << (4 * h)).reshape(-1))
    scales = torch.zeros(tiles * PACK_ROWS * (K // blocksize), dtype=torch.float32, device=B.device)
    first = (torch.arange(K, device=B.device) % blocksize == 0).expand(N, K)  # one element per block
    scales[scale[first]] = absmax.reshape(N, K // blocksize).reshape(-1)
    return codes.to(torch.uint8), scales


def _unpack_example(device):
    codes, _ = pack_4bit(*_pack_example(device)[0])
    return (codes, [32, 192]), {}


@kernel("unpack_4bit", differentiable=False, example=_unpack_example)
def unpack_4bit(codes, shapeB) -> torch.Tensor:
    """bitsandbytes' bytes of the layout's codes (uint8, N * K / 2): each element read from its position."""
    op = "unpack_4bit"
    checks.check(len(shapeB) == 2 and shapeB[0] > 0 and shapeB[1] > 0,
                 f"bnb::{op}: shapeB must be [N, K] with N, K > 0, got {list(shapeB)}")
    N, K = shapeB
    checks.check(K % PACK_COLS == 0, f"bnb::{op}: the packed layout takes K ({K}) a multiple of {PACK_COLS}; got "
                                     f"shapeB {list(shapeB)}")
    tiles = (N + PACK_ROWS - 1) // PACK_ROWS
    checks.dtype_is(op, "codes", codes, torch.uint8)
    checks.numel_is(op, "codes", codes, tiles * PACK_ROWS * K // 2, "the packed layout's bytes (pack_4bit)")
    byte, h, _ = _packed_positions(N, K, K, codes.device)
    values = (codes.reshape(-1)[byte].to(torch.int64) >> (4 * h)) & 15
    return ((values[:, 0::2] << 4) | values[:, 1::2]).to(torch.uint8).reshape(-1)


def _gemm_packed_example(device):
    codes, scales = pack_4bit(*_pack_example(device)[0])
    A = torch.randn(3, 192, generator=torch.Generator().manual_seed(1)).to(device, torch.bfloat16)
    return (A, codes, scales, [32, 192], 64, code4("nf4", device)), \
        {"bias": torch.ones(32, dtype=torch.bfloat16, device=device)}


@kernel("gemm_4bit_packed", differentiable=False, example=_gemm_packed_example)
def gemm_4bit_packed(A, codes, scales, shapeB, blocksize, code, bias=None, int8_activations=False) -> torch.Tensor:
    """A @ W.T (+ bias), W dequantized from the layout in A's dtype (code value times scale in float32, rounded once),
    as gemm_4bit; with int8_activations, _int8_product's definition."""
    op = "gemm_4bit_packed"
    checks.float_dtype(op, "A", A.dtype)
    N, K = _check_packed_shape(op, shapeB, blocksize)
    checks.check(A.dim() >= 1 and A.shape[-1] == K,
                 f"bnb::{op}: A's last dimension ({list(A.shape)}) must equal shapeB[1] = {K}")
    tiles = (N + PACK_ROWS - 1) // PACK_ROWS
    checks.dtype_is(op, "codes", codes, torch.uint8)
    checks.numel_is(op, "codes", codes, tiles * PACK_ROWS * K // 2, "the packed layout's bytes (pack_4bit)")
    checks.same_device(op, "codes", codes, A)
    checks.float32_tensor(op, "scales", scales, A, tiles * PACK_ROWS * (K // blocksize),
                          "the packed layout's scales (pack_4bit)")
    checks.float32_tensor(op, "code", code, A, 16, "the 16 values of the 4-bit type")
    if bias is not None:
        checks.same_device(op, "bias", bias, A)
        checks.check(bias.dim() == 1 and bias.numel() == N,
                     f"bnb::{op}: bias must be a vector of {N} values, got shape {list(bias.shape)}")
        checks.dtype_is(op, "bias", bias, A.dtype)
    byte, h, scale = _packed_positions(N, K, blocksize, A.device)
    values = (codes.reshape(-1)[byte].to(torch.int64) >> (4 * h)) & 15
    if int8_activations:
        return _int8_product(op, A, values, scales.reshape(-1)[scale], code, bias)
    W = (code[values] * scales.reshape(-1)[scale]).to(A.dtype)
    return torch.nn.functional.linear(A, W, bias)


def _int8_product(op, A, values, scale, code, bias) -> torch.Tensor:
    """The int8-activation product (bnb/core/gemm4_packed.h): each row of A quantized per group of 64 columns to
    q = round(a / sa) in [-127, 127], sa = max|a| / 127 (a group of zeros: q = 0; a group holding an infinity or
    NaN: q = 0 and sa = NaN); code values as round(127 * value), in [-1, 1]; per group the exact integer sum of
    q * value, times step * the weight's scale (step = max|a| / 127^2, NaN for a group not finite), the groups added
    in order in float32; plus bias; rounded to A's dtype.
    values: W's codes (N x K); scale: each element's block scale (N x K)."""
    for i, v in enumerate(code.tolist()):
        checks.check(-1.0 <= v <= 1.0, f"bnb::{op}: int8_activations takes code values in [-1, 1] (each becomes "
                                       f"round(127 * value)), got code[{i}] = {v}")
    N, K = values.shape
    groups = K // PACK_COLS
    a = A.reshape(-1, groups, PACK_COLS).float()
    finite = torch.isfinite(a).all(-1, keepdim=True)
    amax = torch.where(finite, a.abs().amax(-1, keepdim=True), torch.nan)
    sa, step = amax / 127, amax / (127 * 127)
    q = torch.where(finite & (sa > 0), (a / sa).clamp(-127, 127).round(), 0.0).double()
    w = (code.float() * 127).round().double()[values].view(N, groups, PACK_COLS)
    dots = torch.einsum("mgk,ngk->gmn", q, w).float()  # exact integers
    s = scale[:, ::PACK_COLS]  # each group's block scale, N x groups
    acc = torch.zeros(a.shape[0], N, dtype=torch.float32, device=A.device)
    for g in range(groups):
        acc = acc + dots[g] * (step[:, g] * s[:, g].unsqueeze(0))
    if bias is not None:
        acc = acc + bias.float()
    return acc.to(A.dtype).view(*A.shape[:-1], N)
