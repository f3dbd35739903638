"""A 4-bit weight held in the tiled CPU layout (bnb::pack_4bit, bnb/core/gemm4_packed.h) instead of bitsandbytes'
bytes. Linear4bit, used for inference on the CPU, repacks its weight in place (as bitsandbytes' Linear4bit does), so
the weight is held once: matmul_4bit's tiled copy for a weight given as tensors keeps both layouts, twice the bytes.

Such a weight's quant_state is a new QuantState marked with a CpuLayout (the old one, unmarked, stays valid for the
old bytes). Every reader in bnb takes the tiled bytes through it: matmul_4bit multiplies them (gemm_4bit_packed, any
number of rows), dequantize_4bit, gemv_4bit and the gradient paths read bitsandbytes' bytes unpacked from them, and
state_dict() writes those, bit for bit. Linear4bit returns the weight to bitsandbytes' bytes where a call needs them
(gradients, knob cpu.pack_4bit off, a move off the CPU, state_dict(keep_vars=True)). Code that reads weight.data
by itself, not through bnb, sees the tiled bytes, as with bitsandbytes' CPU layout."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Optional

import torch

from . import _C
from . import config as bnb_config
from .quant_state import QuantState

_ROWS = 16  # bnb/core/gemm4_packed.h: rows per tile

# Held while a weight changes layout and while a caller takes a weight's (data, state) pair: a layer called from
# several threads must not read a state with the other layout's bytes.
LOCK = threading.RLock()


@dataclass(eq=False)
class CpuLayout:
    """What a marked quant_state adds: the layout's float32 block scales (with the shape and code values the
    product takes), the tensor of bitsandbytes' codes it replaced (its dtype and shape: quant_storage) and that state
    itself (`plain`), and the tiled codes it describes (flat, sharing the weight's storage: no bytes of its own).
    bnb refuses other tensors with this state rather than misread them; holding the codes keeps their memory from
    being handed to another tensor that could then pass for them."""

    scales: torch.Tensor
    shape: list       # [N, K]
    code: torch.Tensor  # the quant_type's 16 values (float32, CPU)
    storage_dtype: torch.dtype
    storage_shape: tuple
    plain: QuantState
    codes: torch.Tensor


def layout_of(state: Optional[QuantState]) -> Optional[CpuLayout]:
    return None if state is None else state.__dict__.get("cpu_layout")


def code_bytes(N: int, K: int) -> int:
    """The tiled codes' bytes for an N x K weight: rows padded to tiles of 16."""
    return -(-N // _ROWS) * _ROWS * K // 2


def unpack(codes: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """bitsandbytes' bytes (uint8, N * K / 2) of the tiled codes: bnb::unpack_4bit, pack_4bit's inverse."""
    return torch.ops.bnb.unpack_4bit(codes.reshape(-1), [N, K])


def codes_of(B: torch.Tensor, state: QuantState) -> torch.Tensor:
    """The tiled codes (uint8, flat) of B, the weight whose marked state this is (a view of it, as B.t(), too)."""
    layout = layout_of(state)
    if torch.compiler.is_compiling():
        return B.reshape(-1).view(torch.uint8)
    with torch._C.DisableTorchFunctionSubclass():  # Params4bit's __torch_function__ costs more than the check
        B = B.reshape(-1)
    if B.data_ptr() != layout.codes.data_ptr():
        raise ValueError(
            "bnb: this quant_state describes a weight repacked into the tiled CPU layout (Linear4bit did so for "
            f"inference), but the tensor given with it (shape {list(B.shape)}) is not that weight's data. Pass the "
            "weight's own data with it, or the quant_state the other tensor was made with "
            "(quant_state.cpu_layout.plain holds the state of the weight's original bytes)")
    return B.view(torch.uint8)


def plain_form(B: torch.Tensor, state: QuantState) -> tuple[torch.Tensor, QuantState]:
    """(bitsandbytes' bytes, their unmarked state) of B and its state: unpacked from the tiled codes where the state
    is marked, else as they are."""
    layout = layout_of(state)
    if layout is None:
        return B, state
    N, K = state.shape
    data = unpack(codes_of(B, state), N, K)
    return data.view(layout.storage_dtype).reshape(layout.storage_shape), layout.plain


def int8_activations() -> bool:
    """Whether products over the layout quantize A to int8: knob cpu.int8_activations, where its kernel runs."""
    return bool(bnb_config.get("cpu.int8_activations")) and _C.gemm4_packed_int8_runs()


def product(x: torch.Tensor, codes: torch.Tensor, state: QuantState, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """x @ W.T (+ bias) for a repacked weight's tiled `codes` (flat) and its marked `state`, x on the CPU in a dtype
    the op takes: what matmul_4bit calls for it (the bias in x's dtype, added inside the op), without its general
    checks, which cost more than the product of a small layer's one token."""
    layout = state.__dict__["cpu_layout"]
    return torch.ops.bnb.gemm_4bit_packed(x, codes, layout.scales, layout.shape, state.blocksize, layout.code,
                                          None if bias is None else bias.to(x.dtype), int8_activations())


def repackable(weight, dtype: torch.dtype) -> bool:
    """Whether Linear4bit may repack `weight` (a quantized Params4bit) for products in `dtype` on this CPU: the
    layout takes its shape, a kernel takes the dtype (or int8 activations are on), its scales are finite, and its
    bytes are a whole weight's (not a shard's) and not an inference tensor (made under torch.inference_mode: torch
    refuses to give the Parameter other data outside it)."""
    state = weight.quant_state
    if (state is None or layout_of(state) is not None or weight.device.type != "cpu" or len(state.shape) != 2
            or weight.is_inference() or not bnb_config.get("cpu.pack_4bit")):
        return False
    N, K = state.shape
    if not _C.packed4_fits(N, K, state.blocksize) or weight.numel() * weight.element_size() != N * K // 2:
        return False
    return int8_activations() or (dtype in (torch.float32, torch.float16, torch.bfloat16)
                                  and _C.gemm4_packed_runs(str(dtype), 1))


def repack(weight) -> bool:
    """Puts `weight` (a Params4bit that repackable() took) in the tiled layout, in place: its data becomes the tiled
    codes and its quant_state (and its module's) a marked copy of the old one. False, the weight unchanged, where a
    block scale is infinite or NaN (such rows follow gemv_4bit's rule, which the layout does not keep)."""
    from . import functional as F  # which imports this module
    with LOCK:
        state = weight.quant_state
        N, K = state.shape
        scales = F._absmax_of(state).float().contiguous()
        if not bool(torch.isfinite(scales).all()):
            return False
        data = weight.data
        with torch.inference_mode(False):  # tensors a Parameter can hold, also when called under inference_mode
            codes, scales = torch.ops.bnb.pack_4bit(data, [N, K], scales, state.blocksize)
        state.__dict__.pop("_cpu_pack", None)  # matmul_4bit's copy for this state: it held the old bytes too
        marked = copy.copy(state)
        marked.cpu_layout = CpuLayout(scales, [N, K], F._code4(state.quant_type, codes.device), data.dtype,
                                      tuple(data.shape), state, codes)
        weight._hold(codes.view(-1, 1), marked)
        return True


def restore(weight) -> None:
    """Returns a repacked `weight` to bitsandbytes' bytes and its original quant_state, in place."""
    with LOCK:
        if layout_of(weight.quant_state) is not None:
            data, plain = plain_form(weight.data, weight.quant_state)
            weight._hold(data.contiguous(), plain)


def rebind(weight) -> None:
    """After a copy (pickle, deepcopy) gave the weight new memory: its marked state describes that memory (and lets
    go of the copy of the codes it may have made)."""
    layout = layout_of(weight.quant_state)
    if layout is not None:
        layout.codes = weight.data.reshape(-1)
