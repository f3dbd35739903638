"""4-bit NF4/FP4 quantization in plain torch: the definition bnb/core/blockwise4 implements element for element.

Blocks scale exactly as in 8-bit (see blockwise8.py); each scaled value takes the code of the nearest of the 16
values (blockwise8.nearest_code: exact ties to the lower value, equal values to the lowest code); two codes share a
byte, the even-indexed element in the high nibble; the bytes are viewed as `quant_storage`.
"""

import math

import torch

from .blockwise8 import _FLOATS, _check, _check_blocksize, nearest_code, scale_blocks, times_block_absmax

# bitsandbytes' code values (get_4bit_type): NF4 as published, FP4 as 16 values divided by their maximum, 12.
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
FP4_UNSCALED = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]


def code4(quant_type: str, device=None) -> torch.Tensor:
    _check(quant_type in ("nf4", "fp4"), f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}")
    if quant_type == "nf4":
        return torch.tensor(NF4, dtype=torch.float32, device=device)
    return torch.tensor(FP4_UNSCALED, dtype=torch.float32, device=device) / 12.0


def _packed_bytes(n: int, quant_storage: torch.dtype) -> int:
    nbytes = (n + 1) // 2
    itemsize = torch.empty(0, dtype=quant_storage).element_size()
    _check(nbytes % itemsize == 0,
           f"bnb::quantize_4bit: {n} values pack into {nbytes} bytes, not a whole number of {quant_storage} "
           f"({itemsize} bytes each); use uint8 storage or a size that divides")
    return nbytes


def quantize_4bit(A: torch.Tensor, blocksize: int, quant_type: str,
                  quant_storage: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    _check(A.dtype in _FLOATS, f"bnb::quantize_4bit: A must be float32, float16 or bfloat16, got {A.dtype}")
    _check_blocksize("quantize_4bit", blocksize)
    _check(A.numel() > 0, f"bnb::quantize_4bit: A is empty (shape {list(A.shape)})")
    n = A.numel()
    nbytes = _packed_bytes(n, quant_storage)
    v, absmax = scale_blocks(A, blocksize)
    code = code4(quant_type, A.device)
    codes = nearest_code(v, code)
    # An odd count's last low nibble: the code of 0.0, as bitsandbytes' CUDA kernel quantizes the missing element.
    codes = torch.cat([codes, nearest_code(torch.zeros(2 * nbytes - n, device=A.device), code)])
    packed = (codes[0::2] << 4) | codes[1::2]
    return packed.view(quant_storage).view(-1, 1), absmax


def unpack_codes(A: torch.Tensor, n: int) -> torch.Tensor:
    """The n 4-bit codes (int64) stored in A's bytes, high nibble first."""
    b = A.contiguous().view(torch.uint8).reshape(-1)
    _check(2 * b.numel() >= n, f"bnb::dequantize_4bit: A holds {2 * b.numel()} codes, shape needs {n}")
    return torch.stack([b >> 4, b & 0xF], dim=1).reshape(-1)[:n].long()


def dequantize_4bit(A: torch.Tensor, absmax: torch.Tensor, blocksize: int, quant_type: str, shape,
                    dtype: torch.dtype) -> torch.Tensor:
    _check(dtype in _FLOATS, f"bnb::dequantize_4bit: dtype must be float32, float16 or bfloat16, got {dtype}")
    _check_blocksize("dequantize_4bit", blocksize)
    return dequantize_with_code(A, absmax, code4(quant_type, A.device), blocksize, shape, dtype)


def dequantize_with_code(A, absmax, code, blocksize, shape, dtype):
    n = math.prod(shape)
    _check(absmax.numel() == -(-n // blocksize),
           f"bnb::dequantize_4bit: absmax must hold {-(-n // blocksize)} values, got {absmax.numel()}")
    values = code.float()[unpack_codes(A, n)]
    return times_block_absmax(values, absmax, blocksize).to(dtype).reshape(shape)


def dequantize_4bit_out(A, absmax, blocksize, quant_type, shape, dtype, out) -> None:
    _check(list(out.shape) == list(shape) and out.dtype == dtype,
           f"bnb::dequantize_4bit.out: out must be {dtype} of shape {list(shape)}, got {out.dtype} {list(out.shape)}")
    out.copy_(dequantize_4bit(A, absmax, blocksize, quant_type, shape, dtype))


def gemv_4bit(A, B, shapeB, absmax, code, blocksize) -> torch.Tensor:
    _check(A.numel() == A.shape[-1], f"bnb::gemv_4bit: A must be a single row (leading dimensions of 1), got "
                                     f"shape {list(A.shape)}")
    _check(A.shape[-1] == shapeB[1], f"bnb::gemv_4bit: A has {A.shape[-1]} columns, shapeB {list(shapeB)} needs "
                                     f"{shapeB[1]}")
    W = dequantize_with_code(B, absmax, code, blocksize, shapeB, torch.float32)
    return (A.float() @ W.t()).to(A.dtype)


def gemv_4bit_out(A, B, shapeB, absmax, code, blocksize, out) -> None:
    out.copy_(gemv_4bit(A, B, shapeB, absmax, code, blocksize))


def gemm_4bit(A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None, absmax_code=None,
              absmax_offset=None) -> torch.Tensor:
    _check(absmax_8bit is not None or (absmax_code is None and absmax_offset is None),
           "bnb::gemm_4bit: absmax_code and absmax_offset describe nested statistics and go with absmax_8bit, which "
           "is missing")
    _check(bias is None or bias.dtype == A.dtype, f"bnb::gemm_4bit: bias must be {A.dtype}, got "
                                                  f"{None if bias is None else bias.dtype}")
    if absmax_8bit is not None:
        from .blockwise8 import dequantize_blockwise
        absmax = dequantize_blockwise(absmax_8bit, absmax, absmax_code, 256, torch.float32) + absmax_offset
    W = dequantize_4bit(B, absmax, blocksize, quant_type, shapeB, A.dtype)
    return torch.nn.functional.linear(A, W, bias)
