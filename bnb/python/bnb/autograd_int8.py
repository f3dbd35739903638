"""LLM.int8() matrix multiplication (arXiv:2208.07339) with bitsandbytes' API: `matmul(A, B, state=...)` computes
A @ B.T + bias with A quantized row-wise to int8 and B held as int8 codes (state.CB) and row scales (state.SCB);
with a threshold, A's outlier columns (any |x| >= threshold) are multiplied in A's own precision.

Differences from bitsandbytes 0.50, each deliberate:
- A and a float B are quantized in their own dtype (float32, float16 or bfloat16), not cast to float16 first
  (which overflows past 65504 and rounds twice); the result is A's dtype, as there.
- has_fp16_weights=True quantizes B at every call: bitsandbytes reuses the codes of an earlier call in eval mode
  or while B.grad is set, and then multiplies by a weight the optimizer has since changed.
- The gradient of B takes grad_output's column-wise codes with their column scales (bitsandbytes pairs its
  row-wise codes with the column scales) and leaves A's outlier columns out of the int8 part, as they are added
  exactly afterwards (bitsandbytes counts their other elements twice).
- On a CPU the int8 path is taken in training too (bitsandbytes switches to its dequantize-and-matmul path there,
  MatMul8bitFp, which bnb has for code that calls it).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

import torch

from .reference.int8 import MAX_K

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class GlobalOutlierPooler:
    """bitsandbytes' pool of outlier dimensions across layers (a singleton; the int8 matmul does not use it)."""

    _instance = None

    def __init__(self):
        raise RuntimeError("Call get_instance() instead")

    def initialize(self):
        self.outliers = set()
        self.model_dim = None

    @classmethod
    def get_instance(cls):
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def add_outliers(self, outlier_idx, feature_dim):
        if self.model_dim is None:
            self.model_dim = feature_dim
        if feature_dim != self.model_dim:
            return  # only the first feature dimension seen is pooled, as in bitsandbytes
        self.outliers.update(outlier_idx.tolist())

    def get_current_outlier_idx(self):
        return torch.tensor(sorted(self.outliers), dtype=torch.int64)


@dataclasses.dataclass
class MatmulLtState:
    """What an int8 matmul keeps between calls: the weight's codes CB and row scales SCB, the last outlier columns
    (idx), threshold, has_fp16_weights (B is a float weight, quantized at each call) and is_training. Fields in
    bitsandbytes' order (the first nine positional there too); SB, SBt, CBt, subB and the pool are kept for code
    that sets or reads them."""

    force_no_igemmlt: bool = False
    CB: Optional[torch.Tensor] = None
    SB: Optional[torch.Tensor] = None
    SCB: Optional[torch.Tensor] = None
    SBt: Optional[torch.Tensor] = None
    CBt: Optional[torch.Tensor] = None
    subB: Optional[torch.Tensor] = None
    outlier_pool: Optional[GlobalOutlierPooler] = None
    idx: Optional[torch.Tensor] = None
    threshold: float = 0.0
    is_training: bool = True
    has_fp16_weights: bool = True
    use_pool: bool = False
    has_accumulated_gradients: bool = False

    # Layout fields of bitsandbytes before 0.45, always None there now (TGI and vLLM still read them).
    _deprecated_fields = frozenset({"CxB", "CxBt", "formatB", "_tile_indices"})

    def __getattr__(self, name):
        if name in MatmulLtState._deprecated_fields:
            warnings.warn(f"MatmulLtState.{name} is deprecated and always None (weights are row-major int8)",
                          FutureWarning, stacklevel=2)
            return None
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def reset_grads(self):
        """Forgets the weight's codes (and the unused layouts), so that the next call quantizes B again."""
        self.CB = self.SB = self.SCB = self.SBt = self.CBt = None


def _input_and_bias_grads(ctx, grad_output: torch.Tensor, weight, K: int):
    """(grad_output as rows, d/dA, d/dbias), each where needed: d/dA = grad @ W with W = weight(), the forward's
    weight in A's dtype; d/dbias = grad summed over every leading dimension, in at least float32."""
    grad = grad_output.reshape(-1, grad_output.shape[-1])
    grad_A = grad_bias = None
    if ctx.needs_input_grad[3]:
        acc = torch.promote_types(ctx.bias_dtype, torch.float32)
        grad_bias = grad.sum(0, dtype=acc).to(ctx.bias_dtype)
    if ctx.needs_input_grad[0]:
        grad_A = (grad.to(ctx.a_dtype) @ weight()).view(*grad_output.shape[:-1], K)
    return grad, grad_A, grad_bias


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_input(A: torch.Tensor) -> None:
    if A.dtype not in _FLOATS:
        raise RuntimeError(f"bnb.matmul: A must be float32, float16 or bfloat16, got {_dtype_name(A.dtype)}")
    if A.dim() < 1:
        raise RuntimeError("bnb.matmul: A must have at least one dimension, got a scalar")


def _weight_codes(B: torch.Tensor, state: MatmulLtState) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight's int8 codes [N, K] and row scales [N], from the state, B's own (an Int8Params), or B quantized
    now (a float B with has_fp16_weights, or the first call without codes); kept in the state as bitsandbytes
    does."""
    if state.has_fp16_weights or state.CB is None:
        if B.dtype == torch.int8:
            scb = getattr(B, "SCB", None)
            if state.has_fp16_weights or scb is None:
                why = ("state.has_fp16_weights=True expects a float weight" if state.has_fp16_weights else
                       "neither B.SCB nor state.SCB holds their row scales")
                raise RuntimeError(f"bnb.matmul: B holds int8 codes (shape {list(B.shape)}), but {why}")
            state.CB, state.SCB = B, scb
        else:
            if B.dtype not in _FLOATS or B.dim() != 2:
                raise RuntimeError(f"bnb.matmul: B must be a float32, float16 or bfloat16 weight [N, K] or int8 "
                                   f"codes, got {_dtype_name(B.dtype)} of shape {list(B.shape)}")
            state.CB, state.SCB, _ = torch.ops.bnb.int8_vectorwise_quant(B.detach(), 0.0)
    CB, SCB = state.CB, state.SCB
    if CB.dtype != torch.int8 or CB.dim() != 2:
        raise RuntimeError(f"bnb.matmul: state.CB must be int8 codes [N, K], got {_dtype_name(CB.dtype)} of shape "
                           f"{list(CB.shape)}")
    if SCB is None or SCB.dtype != torch.float32 or SCB.numel() != CB.shape[0]:
        got = "None" if SCB is None else f"{_dtype_name(SCB.dtype)} of shape {list(SCB.shape)}"
        raise RuntimeError(f"bnb.matmul: state.SCB must hold {CB.shape[0]} float32 row scales (one per row of the "
                           f"weight {list(CB.shape)}), got {got}")
    return CB, SCB


def _check_shapes(A: torch.Tensor, shape, bias: Optional[torch.Tensor]) -> None:
    """A [..., K] against a weight of `shape` [N, K], and the bias."""
    N, K = shape
    if A.shape[-1] != K:
        raise RuntimeError(f"bnb.matmul: A has {A.shape[-1]} columns (shape {list(A.shape)}), but the weight is "
                           f"[N, K] = {list(shape)}; A's last dimension must be K")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != N or not bias.is_floating_point()):
        raise RuntimeError(f"bnb.matmul: bias must be a float vector of {N} values (one per output), got "
                           f"{_dtype_name(bias.dtype)} of shape {list(bias.shape)}")


def _checked_codes(A: torch.Tensor, B: torch.Tensor, bias: Optional[torch.Tensor], state):
    """(state, CB, SCB): the state (a fresh one for None) and the weight's codes, A and the bias checked."""
    state = state or MatmulLtState()
    _check_input(A)
    CB, SCB = _weight_codes(B, state)
    _check_shapes(A, CB.shape, bias)
    return state, CB, SCB


def _forward(A, CB, SCB, bias, state, want_col_codes: bool):
    """The product and what its backward needs: (out, CAt, SCAt, subA, outlier_cols)."""
    CAt = SCAt = None
    if want_col_codes:
        CA, CAt, SCA, SCAt, cols = torch.ops.bnb.int8_double_quant(A, state.threshold)
    else:
        CA, SCA, cols = torch.ops.bnb.int8_vectorwise_quant(A, state.threshold)
    if cols is not None:  # a threshold > 0 (rounded to float32): outlier columns in A's precision
        state.idx = cols
        out, subA = torch.ops.bnb.int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, cols, bias)
    else:
        out, subA = torch.ops.bnb.int8_scaled_mm(CA, CB, SCA, SCB, bias, A.dtype), None
    return out, CAt, SCAt, subA, cols


def _empty_product(A, B, bias, state):
    """A @ W.T + bias where A has no elements: zeros (or the bias), differentiable as F.linear is. Nothing is
    quantized (an empty weight could not be)."""
    codes = state.CB if state.CB is not None and not state.has_fp16_weights else None
    shape = tuple(codes.shape) if codes is not None else tuple(B.shape)
    if len(shape) != 2:
        raise RuntimeError(f"bnb.matmul: the weight must be [N, K], got shape {list(shape)}")
    _check_shapes(A, shape, bias)
    W = B if codes is None and B.is_floating_point() else A.new_zeros(shape)
    return torch.nn.functional.linear(A, W.to(A.dtype), None if bias is None else bias.to(A.dtype))


class MatMul8bitLt(torch.autograd.Function):
    """A @ B.T + bias through the int8 ops; gradients to A and bias (through the dequantized weight: the forward's
    own), and to a float B (has_fp16_weights) by an int8 product of grad_output and A, both quantized column-wise,
    plus A's outlier columns exactly."""

    @staticmethod
    def forward(ctx, A, B, out=None, bias=None, state=None):
        state, CB, SCB = _checked_codes(A, B, bias, state)
        grad_B = ctx.needs_input_grad[1] and B.is_floating_point()
        output, CAt, SCAt, subA, cols = _forward(A, CB, SCB, bias, state, grad_B)
        ctx.state, ctx.a_dtype, ctx.b_dtype = state, A.dtype, B.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.grad_B = grad_B
        ctx.save_for_backward(CB, SCB, CAt, SCAt, subA, cols)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        CB, SCB, CAt, SCAt, subA, cols = ctx.saved_tensors
        grad, grad_A, grad_bias = _input_and_bias_grads(
            ctx, grad_output, lambda: torch.ops.bnb.int8_vectorwise_dequant(CB, SCB).to(ctx.a_dtype), CB.shape[1])
        grad_B = None
        if ctx.grad_B:
            grad_B = _weight_gradient(grad, CAt, SCAt, subA, cols).to(ctx.b_dtype)
        return grad_A, grad_B, None, grad_bias, None


class MatMul8bitFp(torch.autograd.Function):
    """bitsandbytes' dequantize-and-matmul int8 product (its CPU/XPU training path): A @ W.T + bias with W the
    weight's codes dequantized (CB * SCB / 127) in A's dtype, A not quantized; gradients to A through the same W,
    to a float B (has_fp16_weights) as grad_output.T @ A in float32, and to the bias. bnb.matmul does not take it
    (bnb's CPU int8 kernels are fast): it is here for code that calls it."""

    @staticmethod
    def forward(ctx, A, B, out=None, bias=None, state=None):
        state, CB, SCB = _checked_codes(A, B, bias, state)
        W = torch.ops.bnb.int8_vectorwise_dequant(CB, SCB).to(A.dtype)
        output = torch.nn.functional.linear(A, W, None if bias is None else bias.to(A.dtype))
        ctx.a_dtype, ctx.b_dtype = A.dtype, B.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.grad_B = ctx.needs_input_grad[1] and B.is_floating_point()
        ctx.save_for_backward(W, A if ctx.grad_B else None)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        W, A = ctx.saved_tensors
        K = W.shape[1]
        grad, grad_A, grad_bias = _input_and_bias_grads(ctx, grad_output, lambda: W, K)
        grad_B = None
        if ctx.grad_B:
            grad_B = (grad.float().t() @ A.reshape(-1, K).float()).to(ctx.b_dtype)
        return grad_A, grad_B, None, grad_bias, None


def _weight_gradient(grad: torch.Tensor, CAt: torch.Tensor, SCAt: torch.Tensor, subA, cols) -> torch.Tensor:
    """grad.T @ A [N, K] in float32: both quantized column-wise (per output and per input feature), their int8
    product in slices of at most MAX_K rows (int32 sums must not overflow), A's outlier columns exactly."""
    _, Cgt, _, SCgt, _ = torch.ops.bnb.int8_double_quant(grad, 0.0)
    CAt = CAt.reshape(-1, CAt.shape[-1])
    if cols is not None:  # (no test of its size: torch.compile cannot branch on it)
        CAt = CAt.index_fill(1, cols, 0)  # their other elements' codes: the exact product below has them
    rows = Cgt.shape[0]
    total = None
    for start in range(0, rows, MAX_K):
        part = torch.ops.bnb.int8_scaled_mm(Cgt[start:start + MAX_K].t().contiguous(),
                                            CAt[start:start + MAX_K].t().contiguous(), SCgt, SCAt, None,
                                            torch.float32)
        total = part if total is None else total + part
    if cols is not None:
        total = total.index_add(1, cols, grad.float().t() @ subA.float())
    return total


def matmul(A: torch.Tensor, B: torch.Tensor, out: Optional[torch.Tensor] = None,
           state: Optional[MatmulLtState] = None, threshold: float = 0.0,
           bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """LLM.int8() A @ B.T + bias for A [..., K] (float32/float16/bfloat16) and B [N, K]: a float weight, an
    Int8Params, or ignored when state.CB holds the codes (has_fp16_weights=False). threshold > 0 sets
    state.threshold, as in bitsandbytes. Result in A's dtype (written into `out` when given)."""
    if not threshold >= 0.0:
        raise ValueError(f"bnb.matmul: threshold must be >= 0 (0 leaves state.threshold as it is), got {threshold}")
    state = state or MatmulLtState()
    if threshold > 0.0:
        state.threshold = threshold
    _check_input(A)
    if A.numel() == 0:
        result = _empty_product(A, B, bias, state)
    elif torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (A, B, bias)):
        result = MatMul8bitLt.apply(A, B, None, bias, state)
    else:  # no autograd node: torch.compile sees the ops alone (A checked above)
        CB, SCB = _weight_codes(B, state)
        _check_shapes(A, CB.shape, bias)
        result = _forward(A, CB, SCB, bias, state, False)[0]
    if out is not None:
        if out.shape != result.shape or out.dtype != result.dtype:  # copy_ would broadcast or convert silently
            raise RuntimeError(f"bnb.matmul: out must be {_dtype_name(result.dtype)} of shape {list(result.shape)}, "
                               f"got {_dtype_name(out.dtype)} of shape {list(out.shape)}")
        return out.copy_(result)
    return result
