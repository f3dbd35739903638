"""bitsandbytes-compatible functional API: quantize/dequantize with QuantState, over torch.ops.bnb.*."""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from .quant_state import QuantState

__all__ = ["QuantState", "create_dynamic_map", "quantize_blockwise", "dequantize_blockwise"]

# Codebooks by name, created on first use ("dynamic": the signed dynamic map).
name2qmap: dict[str, torch.Tensor] = {}


def create_dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> torch.Tensor:
    """The dynamic quantization map (arXiv:1511.04561): 256 sorted float32 values, equal to bitsandbytes'."""
    return torch.tensor(_C.create_dynamic_map(signed, max_exponent_bits, total_bits), dtype=torch.float32)


def _dynamic_map(device: torch.device) -> torch.Tensor:
    if "dynamic" not in name2qmap:
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
    `absmax` and `out`, when given, receive copies of the results. Returns (codes, QuantState)."""
    code = _dynamic_map(A.device) if code is None else code.to(A.device)
    codes, _absmax = torch.ops.bnb.quantize_blockwise(A, code, blocksize)
    if nested:
        offset = _absmax.mean()
        qabsmax, state2 = quantize_blockwise(_absmax - offset, blocksize=blocksize, nested=False)
        state = QuantState(absmax=qabsmax, code=code.clone(), blocksize=blocksize, dtype=A.dtype, offset=offset,
                           state2=state2)
    else:
        state = QuantState(absmax=_absmax, code=code.clone(), blocksize=blocksize, dtype=A.dtype)
    if out is not None:
        codes = out.copy_(codes)
    if absmax is not None:
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
