"""matmul_4bit: x @ W.T for a 4-bit weight W, differentiable in x (QLoRA trains adapters, not W)."""

from __future__ import annotations

from typing import Optional

import torch

from . import functional as F
from .quant_state import QuantState


_GEMV_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # the others (float64) take the dense path


def _weight(B: torch.Tensor, state: QuantState, dtype: torch.dtype) -> torch.Tensor:
    """W in `dtype`, dequantized straight into it where the kernels write it (as bitsandbytes' gemm_4bit does): a
    weight quantized from bfloat16 is not rounded to bfloat16 on its way to float32 activations, so a batch
    computes each row as the single-row gemv does."""
    if dtype in _GEMV_DTYPES:
        return F._dequantize_4bit(B, state, dtype=dtype)
    return F._dequantize_4bit(B, state).to(dtype)


class MatMul4Bit(torch.autograd.Function):
    """Dequantize the weight, then a dense matmul; the backward pass dequantizes again rather than keep it."""

    @staticmethod
    def forward(ctx, A: torch.Tensor, B: torch.Tensor, bias: Optional[torch.Tensor], state: QuantState):
        W = _weight(B, state, A.dtype)
        ctx.state = state
        ctx.save_for_backward(B)
        ctx.has_bias = bias is not None
        return torch.nn.functional.linear(A, W, None if bias is None else bias.to(A.dtype))

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (B,) = ctx.saved_tensors
        grad_A = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_A = grad_out @ _weight(B, ctx.state, grad_out.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_out.reshape(-1, grad_out.shape[-1]).sum(0)
        return grad_A, None, grad_bias, None


def matmul_4bit(A: torch.Tensor, B: torch.Tensor, quant_state: QuantState, out: Optional[torch.Tensor] = None,
                bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A @ W.T (+ bias), W = dequantize_4bit(B, quant_state). One row of a gemv dtype without grad takes gemv_4bit,
    which never materializes W; anything else dequantizes and runs a dense matmul."""
    if quant_state is None:
        raise ValueError("matmul_4bit needs the weight's quant_state")
    if A.numel() == A.shape[-1] and A.dtype in _GEMV_DTYPES and not (torch.is_grad_enabled() and A.requires_grad):
        result = F.gemv_4bit(A, B, state=quant_state)
        if bias is not None:
            result = result + bias.to(result.dtype)
    else:
        result = MatMul4Bit.apply(A, B, bias, quant_state)
    if out is not None:
        return out.copy_(result)
    return result
