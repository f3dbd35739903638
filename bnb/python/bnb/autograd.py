"""matmul_4bit: x @ W.T for a 4-bit weight W, differentiable in x (QLoRA trains adapters, not W); and the
gradients of the ops that multiply by a 4-bit weight (gemv_4bit, gemm_4bit) in their activations and bias."""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from . import _C
from . import config as bnb_config
from . import cpu_layout
from . import functional as F
from .quant_state import QuantState


_GEMV_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # the others (float64) take the dense path


def _weight(B: torch.Tensor, state: QuantState, dtype: torch.dtype) -> torch.Tensor:
    """W in `dtype`, dequantized straight into it where the kernels write it (as gemm_4bit does): a weight quantized
    from bfloat16 is not rounded to bfloat16 on its way to float32 activations."""
    if dtype in _GEMV_DTYPES:
        return F._dequantize_4bit(B, state, dtype=dtype)
    return F._dequantize_4bit(B, state).to(dtype)


class MatMul4Bit(torch.autograd.Function):
    """A @ W.T for activations the ops do not take (float64): dequantize the weight, then a dense matmul; the
    backward pass dequantizes again rather than keep it. The bias is added outside (matmul_4bit)."""

    @staticmethod
    def forward(ctx, A: torch.Tensor, B: torch.Tensor, state: QuantState):
        ctx.state = state
        ctx.save_for_backward(B)
        return torch.nn.functional.linear(A, _weight(B, state, A.dtype))

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (B,) = ctx.saved_tensors
        grad_A = None
        if ctx.needs_input_grad[0]:
            grad_A = grad_out @ _weight(B, ctx.state, grad_out.dtype)
        return grad_A, None, None


def _plus_bias(y: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """y + bias, summed in float32 (float64 for float64 y) and rounded once to y's dtype. A bias of another dtype is
    not rounded on its own first: eager would round it and inductor, which fuses the cast into the add, would not,
    so compiled and eager results differed (by 0.0078 for one bfloat16 row)."""
    if bias is None:
        return y
    if bias.dtype == y.dtype:  # torch adds float16 and bfloat16 in float32 and rounds once: the same bits, one op
        return y + bias
    acc = torch.promote_types(y.dtype, torch.float32)
    return (y.to(acc) + bias.to(acc)).to(y.dtype)


def matmul_4bit(A: torch.Tensor, B: torch.Tensor, quant_state: QuantState, out: Optional[torch.Tensor] = None,
                bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A @ W.T (+ bias), W = dequantize_4bit(B, quant_state). One row without grad takes gemv_4bit, which never
    materializes W, and adds the bias after it (_plus_bias); more rows, or grad, take gemm_4bit, which dequantizes
    W in A's dtype and adds the bias in A's dtype inside the op, as bitsandbytes' matmul_4bit does; float64
    activations a dense matmul here. Each path rounds as the same code under torch.compile does."""
    if quant_state is None:
        raise ValueError("matmul_4bit needs the weight's quant_state")
    if not A.is_floating_point():  # the weight would be truncated to A's integers, and the product too
        raise RuntimeError(f"matmul_4bit: A must be a floating-point tensor, got {str(A.dtype).removeprefix('torch.')}")
    if len(quant_state.shape) != 2:
        raise ValueError(f"matmul_4bit: quant_state.shape must be 2D [N, K], got {list(quant_state.shape)}")
    N, K = quant_state.shape
    packed = _cpu_packed(A, B, quant_state, bias)
    if packed is None:  # a weight in the tiled CPU layout that this call cannot multiply so: bitsandbytes' bytes
        B, quant_state = cpu_layout.plain_form(B, quant_state)
    if packed is not None:
        codes, scales, int8 = packed
        # The bias in A's dtype, added to each float32 sum inside the op and rounded once with it (as gemm_4bit).
        result = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], quant_state.blocksize,
                                                F._code4(quant_state.quant_type, A.device),
                                                None if bias is None else bias.to(A.dtype), int8)
    elif A.shape[-1] == N and N != K:
        result = _plus_bias(_matmul_kn(A, B, quant_state), bias)
    elif A.dtype not in _GEMV_DTYPES:
        result = _plus_bias(MatMul4Bit.apply(A, B, quant_state), bias)
    elif A.numel() == A.shape[-1] and not (torch.is_grad_enabled() and A.requires_grad):
        # The quant_type's table, not state.code: gemm_4bit dequantizes by quant_type, and a row must not be
        # computed with other values than a batch (as bitsandbytes' matmul_4bit reads no code either).
        y = F._gemv_4bit(A, B, quant_state, F._code4(quant_state.quant_type, A.device))
        result = _plus_bias(y, bias)
    else:  # differentiable in A and bias through the op's registered gradient
        # Nested statistics go to the op as they are (the CPU's small-batch kernel reads them in place).
        absmax, nested = F._scale_args(quant_state)
        result = torch.ops.bnb.gemm_4bit(A, B, list(quant_state.shape), absmax, quant_state.blocksize,
                                         quant_state.quant_type, None if bias is None else bias.to(A.dtype), *nested)
    if out is not None:
        return out.copy_(result)
    return result


def _wants_grad(A: torch.Tensor, bias: Optional[torch.Tensor]) -> bool:
    """Whether a product of A (and bias) by a 4-bit weight must be differentiable: grad on, and either requiring it."""
    return torch.is_grad_enabled() and (A.requires_grad or (bias is not None and bias.requires_grad))


def _cpu_packed(A, B, quant_state, bias) -> Optional[tuple[torch.Tensor, torch.Tensor, bool]]:
    """The weight's tiled CPU layout (codes, scales of bnb::pack_4bit, and whether to quantize A to int8: knob
    cpu.int8_activations, where its kernel runs) where this product takes it, else None: on the CPU, without grad,
    and either the weight itself in the layout (Linear4bit's repack, cpu_layout), or in eager mode, knob
    cpu.pack_4bit on, a shape the layout takes, a CPU kernel for A's dtype and rows (int8 activations: any), every
    block scale finite (a non-finite one keeps gemv_4bit's rule), and weight tensors that
    are not inference tensors (made under torch.inference_mode, they track no version). Made at first use and kept on
    quant_state, keyed by the identity and version counter of B and of the scales' tensors: an in-place change
    through them, or a tensor put in their place, makes a new one (a write in place through .data, which bumps no
    version, is not seen)."""
    if (A.device.type != "cpu" or B.device.type != "cpu" or A.dtype not in _GEMV_DTYPES or A.dim() == 0
            or A.numel() == 0 or A.shape[-1] != quant_state.shape[-1]):
        return None
    if _wants_grad(A, bias):
        return None
    layout = cpu_layout.layout_of(quant_state)
    if layout is not None:  # the weight itself is in the layout (Linear4bit repacked it): any rows, also compiled
        # Compiled code takes the default products: a knob read (C++) would break the graph.
        int8 = not torch.compiler.is_compiling() and cpu_layout.int8_activations()
        return cpu_layout.codes_of(B, quant_state), layout.scales, int8
    if torch.compiler.is_compiling():
        return None
    N, K = quant_state.shape
    blocksize = quant_state.blocksize
    if not _C.packed4_fits(N, K, blocksize) or not bnb_config.get("cpu.pack_4bit"):
        return None
    int8 = cpu_layout.int8_activations()
    if not int8 and not _C.gemm4_packed_runs(str(A.dtype), A.numel() // K):
        return None
    sources = [B, quant_state.absmax]
    if quant_state.nested:
        sources += [quant_state.state2.absmax, quant_state.state2.code]
        if isinstance(quant_state.offset, torch.Tensor):
            sources.append(quant_state.offset)
    with torch._C.DisableTorchFunctionSubclass():  # Params4bit's __torch_function__ costs more than the key
        if any(t.is_inference() for t in sources):  # made under inference_mode: no version counter to watch
            return None
        key = tuple((t.data_ptr(), t._version, t.numel()) for t in sources) + ((N, K, blocksize),)
    cached = getattr(quant_state, "_cpu_pack", None)
    if cached is None or cached[0] != key:
        scales = F._absmax_of(quant_state).float().contiguous()
        packed = None
        if bool(torch.isfinite(scales).all()):
            packed = torch.ops.bnb.pack_4bit(B, [N, K], scales, blocksize)
        # The sources are held with the layout: while it lives, no other tensor can take their addresses, so an
        # equal key is the same memory (a weight replaced through .data, its old storage freed, could otherwise
        # come back at the same address with the same version and match).
        cached = quant_state._cpu_pack = (key, sources, packed)
    return None if cached[2] is None else (*cached[2], int8)


def _matmul_kn(A, B, quant_state):
    """A weight quantized as [K, N] (in_features first), which bitsandbytes 0.50 still multiplies, with a
    DeprecationWarning: W is dequantized and A @ W taken densely (square weights cannot be told apart, and are
    [N, K])."""
    if not torch.compiler.is_compiling():
        warnings.warn(f"matmul_4bit: weight was quantized from a [K, N] tensor (quant_state.shape="
                      f"{list(quant_state.shape)}, A has {A.shape[-1]} columns). Re-quantize from the weight in "
                      "[N, K] (out_features, in_features) orientation. This will be an error in a future version.",
                      DeprecationWarning, stacklevel=3)
    return torch.nn.functional.linear(A, _weight(B, quant_state, A.dtype).t())


def _save_weight_args(ctx, inputs, output) -> None:
    """Keeps every argument but A (the activations, whose dtype is all the backward needs): tensors through
    save_for_backward, the rest (shapes, blocksize, quant_type, absent optionals) as they are."""
    ctx.a_dtype = inputs[0].dtype
    ctx.tensor_at = [i for i, t in enumerate(inputs) if i > 0 and isinstance(t, torch.Tensor)]
    ctx.others = [None if isinstance(t, torch.Tensor) else t for t in inputs]
    ctx.save_for_backward(*[inputs[i] for i in ctx.tensor_at])


def _weight_args(ctx) -> list:
    args = list(ctx.others)
    for i, t in zip(ctx.tensor_at, ctx.saved_tensors):
        args[i] = t
    return args


def _nested_scales(absmax, absmax_8bit, absmax_code, absmax_offset):
    """The float32 per-block scales of a 4-bit weight's op arguments, nested statistics dequantized as the kernels
    do (absmax then holds the 8-bit codes' scales, as the schemas say)."""
    if absmax_8bit is None:
        return absmax
    # The offset as the kernels add it: one value, in float32 (any dtype and shape of one value is taken).
    return torch.ops.bnb.dequantize_blockwise(absmax_8bit, absmax, absmax_code, 256, torch.float32) \
        + absmax_offset.to(torch.float32).reshape(())


def _gemv_4bit_backward(ctx, grad):
    """d(A @ W.T)/dA = grad @ W; W is not differentiable (its codes are integers)."""
    _, B, shapeB, absmax, code, blocksize, absmax_8bit, absmax_code, absmax_offset = _weight_args(ctx)
    grad_A = None
    if ctx.needs_input_grad[0]:
        from .reference.blockwise4 import dequantize_with_code  # the op takes a codebook, not a quant_type
        scales = _nested_scales(absmax, absmax_8bit, absmax_code, absmax_offset)
        W = dequantize_with_code(B, scales, code, blocksize, shapeB, torch.float32)
        grad_A = (grad.float() @ W).to(ctx.a_dtype)
    return grad_A, None, None, None, None, None, None, None, None


def _gemm_4bit_backward(ctx, grad):
    _, B, shapeB, absmax, blocksize, quant_type, bias, absmax_8bit, absmax_code, absmax_offset = _weight_args(ctx)
    grad_A = grad_bias = None
    if ctx.needs_input_grad[0]:
        scales = _nested_scales(absmax, absmax_8bit, absmax_code, absmax_offset)
        W = torch.ops.bnb.dequantize_4bit(B, scales, blocksize, quant_type, shapeB, ctx.a_dtype)
        grad_A = grad @ W
    if bias is not None and ctx.needs_input_grad[6]:
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0).to(bias.dtype)
    return grad_A, None, None, None, None, None, grad_bias, None, None, None


_registered = False


def register() -> None:
    """Gives gemv_4bit and gemm_4bit gradients in A (and bias), once: without them, backward through the op left
    A.grad None with only a warning. Every backend's kernel shares these formulas."""
    global _registered
    if _registered:
        return
    torch.library.register_autograd("bnb::gemv_4bit", _gemv_4bit_backward, setup_context=_save_weight_args)
    torch.library.register_autograd("bnb::gemm_4bit", _gemm_4bit_backward, setup_context=_save_weight_args)
    _registered = True


# bitsandbytes keeps LLM.int8()'s autograd function beside the 4-bit one (bitsandbytes.autograd._functions).
from .autograd_int8 import (  # noqa: E402,F401
    GlobalOutlierPooler, MatMul8bitFp, MatMul8bitLt, MatmulLtState, matmul)
from . import _missing  # noqa: E402

__getattr__ = _missing.install(globals(), __name__)
