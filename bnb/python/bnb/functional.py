"""bitsandbytes-compatible functional API: quantize/dequantize with QuantState, over torch.ops.bnb.*."""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from .quant_state import QuantState

__all__ = [
    "QuantState", "create_dynamic_map", "quantize_blockwise", "dequantize_blockwise", "get_4bit_type",
    "quantize_4bit", "dequantize_4bit", "quantize_nf4", "quantize_fp4", "dequantize_nf4", "dequantize_fp4",
    "gemv_4bit", "has_avx512bf16",
]

_BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)

def has_avx512bf16() -> bool:
    """Whether this CPU has the AVX512-BF16 instructions, by CPUID (torch's cpuinfo), as bitsandbytes asks its own
    library. False on CPUs of other architectures."""
    return bool(torch.cpu.get_capabilities().get("avx512_bf16", False))


def create_dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> torch.Tensor:
    """The dynamic quantization map (arXiv:1511.04561): 256 sorted float32 values, equal to bitsandbytes'."""
    return torch.tensor(_C.create_dynamic_map(signed, max_exponent_bits, total_bits), dtype=torch.float32)


# Codebooks by name ("dynamic": the signed dynamic map, the default code). Made at import (256 values, microseconds)
# rather than on first use: torch.compile cannot trace the C++ call that makes it, so a compiled function that was
# the first to use the default code failed under fullgraph=True.
name2qmap: dict[str, torch.Tensor] = {"dynamic": create_dynamic_map()}


def _dynamic_map(device: torch.device) -> torch.Tensor:
    if "dynamic" not in name2qmap:  # removed by the user: made again (eagerly)
        name2qmap["dynamic"] = create_dynamic_map()
    return name2qmap["dynamic"].to(device)


def quantize_blockwise(
    A: torch.Tensor,
    code: Optional[torch.Tensor] = None,
    absmax: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: int = 4096,
    nested: bool = False,
) -> tuple[torch.Tensor, QuantState]:
    """Quantizes A (float32/float16/bfloat16) in blocks of `blocksize` values to 8-bit codes of `code` (default:
    the signed dynamic map). nested=True quantizes the absmax values too (minus their mean, the offset).
    `out` (uint8, A's shape) and `absmax` (float32, one per block), when given, receive the results in place
    (with nested=True, `absmax` receives the quantized absmax). Returns (codes, QuantState)."""
    code = _dynamic_map(A.device) if code is None else code.to(A.device)
    if out is not None or absmax is not None:
        # Every argument is checked before anything of the user's is written. The op's Meta kernel checks A, code
        # and blocksize and sizes absmax by the op's own rule.
        _, want = torch.ops.bnb.quantize_blockwise(torch.empty_like(A, device="meta"), code.to("meta"), blocksize)
        if nested and absmax is not None and (absmax.dtype != torch.uint8 or absmax.shape != want.shape):
            raise ValueError(f"quantize_blockwise: with nested=True, absmax receives the {want.numel()} quantized "
                             f"absmax codes: expected torch.uint8 of shape {tuple(want.shape)}, got {absmax.dtype} of "
                             f"shape {tuple(absmax.shape)}")
    if out is not None or (absmax is not None and not nested):
        codes = out if out is not None else torch.empty(A.shape, dtype=torch.uint8, device=A.device)
        _absmax = absmax if absmax is not None and not nested else torch.empty_like(want, device=A.device)
        torch.ops.bnb.quantize_blockwise_into(A, code, blocksize, codes, _absmax)
    else:
        codes, _absmax = torch.ops.bnb.quantize_blockwise(A, code, blocksize)
    if nested:
        offset = _absmax.mean()
        qabsmax, state2 = quantize_blockwise(_absmax - offset, blocksize=blocksize, nested=False)
        state = QuantState(absmax=qabsmax, code=code.clone(), blocksize=blocksize, dtype=A.dtype, offset=offset,
                           state2=state2)
    else:
        state = QuantState(absmax=_absmax, code=code.clone(), blocksize=blocksize, dtype=A.dtype)
    if absmax is not None and nested:
        state.absmax = absmax.copy_(state.absmax)
    return codes, state


def dequantize_blockwise(
    A: torch.Tensor,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[torch.Tensor] = None,
    code: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: int = 4096,
    nested: bool = False,
) -> torch.Tensor:
    """Undoes quantize_blockwise. Takes the QuantState, or absmax (+ code, blocksize; dtype float32) without one;
    writes into `out` when given."""
    if quant_state is None and absmax is None:
        raise ValueError("dequantize_blockwise requires either quant_state or absmax")
    if quant_state is None:
        code = _dynamic_map(A.device) if code is None else code
        blocks = -(-A.numel() // blocksize) if blocksize > 0 else None
        if blocks is not None and absmax.numel() != blocks:  # most often a blocksize left at its default
            raise ValueError(f"dequantize_blockwise: absmax holds {absmax.numel()} values, but A's {A.numel()} in "
                             f"blocks of {blocksize} need {blocks}; pass the blocksize A was quantized with")
        quant_state = QuantState(absmax=absmax, code=code, blocksize=blocksize, dtype=torch.float32)
    absmax = quant_state.absmax
    if quant_state.nested:
        absmax = dequantize_blockwise(quant_state.absmax, quant_state.state2) + quant_state.offset
        absmax = absmax.float()
    code = quant_state.code.to(A.device)
    if out is not None:
        torch.ops.bnb.dequantize_blockwise.out(A, absmax, code, quant_state.blocksize, quant_state.dtype, out=out)
        return out
    return torch.ops.bnb.dequantize_blockwise(A, absmax, code, quant_state.blocksize, quant_state.dtype)


# Codebooks get_4bit_type offers beside the two the kernels quantize to, in bitsandbytes' order: symmetric int4,
# and AbnormalFloat4 for blocksize 64 as published (Yoshida, arXiv:2306.06965), largest first.
_INT4 = [7, 6, 5, 4, 3, 2, 1, 0, -0.0, -1, -2, -3, -4, -5, -6, -7]
_AF4_BS64 = [1.0, 0.72424863, 0.55496234, 0.42563882, 0.31675666, 0.21961274, 0.12934483, 0.04273164, 0.0,
             -0.04934812, -0.14982478, -0.25607552, -0.3736951, -0.51243739, -0.69441008, -1.0]


def get_4bit_type(typename: str, device=None, blocksize: int = 64) -> torch.Tensor:
    """The 16 code values of "nf4" or "fp4" (bitsandbytes', FP4 normalized to [-1, 1]), or of "int4" and "af4"
    (blocksize 64 only), as float32 in [-1, 1]. quantize_4bit takes nf4 and fp4; the others are codebooks only."""
    from .reference.blockwise4 import code4
    if typename in ("nf4", "fp4"):
        return code4(typename, device)
    if typename == "int4":
        return torch.tensor(_INT4, dtype=torch.float32, device=device) / 7
    if typename == "af4":
        if blocksize != 64:
            raise NotImplementedError(f"4-bit AbnormalFloats are published for blocksize 64 only, got {blocksize}")
        return torch.tensor(_AF4_BS64, dtype=torch.float32, device=device)
    raise NotImplementedError(f"Typename {typename} not supported (bnb has nf4, fp4, int4 and af4)")


def _check_4bit(blocksize: int, quant_type: str, dtype: torch.dtype, what: str) -> None:
    if blocksize not in _BLOCKSIZES:
        raise ValueError(f"invalid blocksize {blocksize}: expected one of {_BLOCKSIZES}")
    if quant_type not in ("nf4", "fp4"):
        raise ValueError(f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}")
    if dtype not in _FLOATS:
        raise ValueError(f"{what} supports float32, float16 and bfloat16, got {dtype}")


def quantize_4bit(
    A: torch.Tensor,
    absmax: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: Optional[int] = None,
    compress_statistics: bool = False,
    quant_type: str = "fp4",
    quant_storage: torch.dtype = torch.uint8,
) -> tuple[torch.Tensor, QuantState]:
    """Quantizes A to 4-bit NF4/FP4 codes in blocks of `blocksize` (default 64), packed two per byte in a
    (n+1)//(2*itemsize) x 1 tensor of `quant_storage`. compress_statistics quantizes the absmax values to 8 bits
    (blocksize 256, minus their mean). Returns (packed, QuantState)."""
    blocksize = 64 if blocksize is None else blocksize
    _check_4bit(blocksize, quant_type, A.dtype, "4-bit quantization")
    if out is not None or absmax is not None:
        _check_4bit_outputs(A, out, absmax, blocksize, quant_type, quant_storage, compress_statistics)
    packed, _absmax = torch.ops.bnb.quantize_4bit(A, blocksize, quant_type, quant_storage)
    code = get_4bit_type(quant_type, device=A.device)
    if compress_statistics:
        offset = _absmax.mean()
        qabsmax, state2 = quantize_blockwise(_absmax - offset, blocksize=256)
        state = QuantState(absmax=qabsmax, shape=A.shape, dtype=A.dtype, blocksize=blocksize, code=code,
                           quant_type=quant_type, offset=offset, state2=state2)
    else:
        state = QuantState(absmax=_absmax, shape=A.shape, dtype=A.dtype, blocksize=blocksize, code=code,
                           quant_type=quant_type)
    if out is not None:
        packed = out.copy_(packed)
    if absmax is not None:
        state.absmax = absmax.copy_(state.absmax)
    return packed, state


def _check_4bit_outputs(A, out, absmax, blocksize, quant_type, quant_storage, compress_statistics) -> None:
    """Checks quantize_4bit's out= and absmax= before anything of the user's is written: the results are copied
    into them, and a copy would broadcast a wrong shape or convert a wrong dtype silently. The op's Meta kernel
    checks A and sizes both by the op's own rule."""
    want_packed, want_absmax = torch.ops.bnb.quantize_4bit(torch.empty_like(A, device="meta"), blocksize,
                                                           quant_type, quant_storage)
    # With compress_statistics, absmax receives the 8-bit codes of the absmax values (as in bitsandbytes).
    absmax_dtype = torch.uint8 if compress_statistics else torch.float32
    for name, given, dtype, shape in (("out", out, quant_storage, want_packed.shape),
                                      ("absmax", absmax, absmax_dtype, want_absmax.shape)):
        if given is not None and (given.dtype != dtype or given.shape != shape):
            raise ValueError(f"quantize_4bit: {name} must be {dtype} of shape {tuple(shape)} for A of shape "
                             f"{tuple(A.shape)} (blocksize {blocksize}, compress_statistics={compress_statistics}), "
                             f"got {given.dtype} of shape {tuple(given.shape)}")
        if given is not None and given.requires_grad and torch.is_grad_enabled():  # as the 8-bit op refuses it
            raise RuntimeError(f"quantize_4bit: {name} requires grad; out= arguments do not support automatic "
                               "differentiation (use torch.no_grad() or a tensor without grad)")


def _absmax_of(state: QuantState) -> torch.Tensor:
    """The float32 absmax per block, undoing nested quantization."""
    if not state.nested:
        return state.absmax
    return (dequantize_blockwise(state.absmax, state.state2) + state.offset).float()


def dequantize_4bit(
    A: torch.Tensor,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: Optional[int] = None,
    quant_type: str = "fp4",
) -> torch.Tensor:
    """Undoes quantize_4bit. Without a quant_state, takes absmax and out (whose shape and dtype are the
    result's)."""
    if quant_state is None:
        if absmax is None or out is None:
            raise ValueError("dequantize_4bit requires both absmax and out when quant_state is not provided")
        quant_state = QuantState(absmax=absmax, shape=out.shape, dtype=out.dtype,
                                 blocksize=64 if blocksize is None else blocksize, quant_type=quant_type)
    out = _dequantize_4bit(A, quant_state, out)
    # As bitsandbytes: packed codes of shape (1, n) are a transposed weight's (B.t()), and come back transposed.
    return out.t() if A.dim() == 2 and A.shape[0] == 1 and out.dim() == 2 else out


def _dequantize_4bit(A: torch.Tensor, quant_state: QuantState, out: Optional[torch.Tensor] = None,
                     dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The weight of shape quant_state.shape, whatever A's layout (the modules' and matmul_4bit's form), in `dtype`
    (default: the state's), computed there directly rather than rounded to the state's dtype first."""
    _check_4bit(quant_state.blocksize, quant_state.quant_type, quant_state.dtype, "4-bit dequantization")
    absmax = _absmax_of(quant_state)
    dtype = quant_state.dtype if dtype is None else dtype
    args = (A, absmax, quant_state.blocksize, quant_state.quant_type, list(quant_state.shape), dtype)
    if out is not None:
        torch.ops.bnb.dequantize_4bit.out(*args, out=out)
        return out
    return torch.ops.bnb.dequantize_4bit(*args)


def quantize_fp4(A, absmax=None, out=None, blocksize=None, compress_statistics=False, quant_storage=torch.uint8):
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "fp4", quant_storage)


def quantize_nf4(A, absmax=None, out=None, blocksize=None, compress_statistics=False, quant_storage=torch.uint8):
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "nf4", quant_storage)


def dequantize_fp4(A, quant_state=None, absmax=None, out=None, blocksize=None):
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "fp4")


def dequantize_nf4(A, quant_state=None, absmax=None, out=None, blocksize=None):
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "nf4")


def gemv_4bit(A: torch.Tensor, B: torch.Tensor, out: Optional[torch.Tensor] = None, transposed_A: bool = False,
              transposed_B: bool = False, state: Optional[QuantState] = None) -> torch.Tensor:
    """A (one row, leading dimensions of 1) times the 4-bit weight B (quant state `state`) transposed:
    F.linear(A, dequantize_4bit(B, state)) without materializing the weight."""
    if state is None:
        raise ValueError("state cannot be None. gemv_4bit() requires the state from quantize_4bit()")
    return _gemv_4bit(A, B, state, state.code, out)


def _gemv_4bit(A: torch.Tensor, B: torch.Tensor, state: QuantState, code: torch.Tensor,
               out: Optional[torch.Tensor] = None) -> torch.Tensor:
    args = (A, B, list(state.shape), _absmax_of(state), code, state.blocksize)
    if out is not None:
        torch.ops.bnb.gemv_4bit.out(*args, out=out)
        return out
    return torch.ops.bnb.gemv_4bit(*args)
