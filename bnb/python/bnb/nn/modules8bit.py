"""Int8Params and the LLM.int8() modules (Linear8bitLt, Embedding8bit), with StableEmbedding, Embedding and
OutlierAwareLinear. As in bitsandbytes, a weight is quantized when its module moves to a device (`.to(...)`,
`.cuda()`, `.cpu()`), to int8 codes (the weight's data, also `weight.CB`) and one float32 scale per row
(`weight.SCB`); state dicts carry bitsandbytes' keys: `weight` (int8), `SCB` (float32) and `weight_format`
(uint8 0, "row").

Differences from bitsandbytes 0.50, each deliberate:
- A weight is quantized from its own dtype, not cast to float16 first.
- The codes and scales stay on the weight after the first forward (bitsandbytes moves them to `module.state` and
  sets the weight's to None); `state.CB` and `state.SCB` hold them too.
- Loading a quantized checkpoint into a module not yet quantized works (bitsandbytes raises), a float checkpoint
  into a quantized module is quantized (bitsandbytes copies the floats into the int8 codes), and every problem with
  a checkpoint (dtypes, shapes, negative scales, another weight_format) goes into load_state_dict's error list.
- Linear8bitLt leaves its bias as it is (bitsandbytes converts it to the input's dtype at each call): the ops add a
  bias of any float dtype, once rounded.
- Embedding8bit saves and loads state dicts (bitsandbytes raises NotImplementedError), with Linear8bitLt's keys.
- OutlierAwareLinear.forward returns forward_with_outliers(x, outlier_idx) (bitsandbytes' returns None).
"""

from __future__ import annotations

import copy
import logging
from typing import Optional

import torch
from torch import nn

from ..autograd_int8 import MatmulLtState, matmul
from ..utils import INVERSE_LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING, OutlierTracer

logger = logging.getLogger(__name__)

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _rebuild_int8_params(data, requires_grad, has_fp16_weights, SCB):
    return Int8Params(data, requires_grad, has_fp16_weights, SCB=SCB)


class Int8Params(nn.Parameter):
    """A weight that quantizes itself to int8 codes (row-wise, LLM.int8()) on its first move to a device unless
    has_fp16_weights; then its data are the codes (also CB) and SCB the float32 scale of each row."""

    def __new__(cls, data: Optional[torch.Tensor] = None, requires_grad: bool = True, has_fp16_weights: bool = False,
                CB: Optional[torch.Tensor] = None, SCB: Optional[torch.Tensor] = None, **kwargs) -> "Int8Params":
        # **kwargs: transformers passes an old parameter's __dict__ along.
        data = torch.empty(0) if data is None else data
        self = torch.Tensor._make_subclass(cls, data, requires_grad)
        self.CB = data if CB is None and data.dtype == torch.int8 else CB
        self.SCB = SCB
        self.has_fp16_weights = has_fp16_weights
        return self

    def __reduce_ex__(self, proto):
        # nn.Parameter's reduction rebuilds a plain Parameter: a pickled module would come back with codes that no
        # longer quantize, move their scales, or save them.
        return _rebuild_int8_params, (self.data, self.requires_grad, self.has_fp16_weights, self.SCB)

    def __deepcopy__(self, memo):
        data = copy.deepcopy(self.data, memo)
        CB = None if self.CB is None or self.dtype == torch.int8 else copy.deepcopy(self.CB, memo)
        return type(self).__new__(type(self), data, self.requires_grad, self.has_fp16_weights, CB,
                                  copy.deepcopy(self.SCB, memo))

    def _quantize(self, device) -> "Int8Params":
        if self.dtype not in _FLOATS:
            raise RuntimeError(f"Int8Params: cannot quantize a {_name(self.dtype)} weight of shape {list(self.shape)}; "
                               "expected float32, float16 or bfloat16")
        codes, scb, _ = torch.ops.bnb.int8_vectorwise_quant(self.data.contiguous().to(device), 0.0)
        return self._hold(codes, scb)

    def _hold(self, codes: torch.Tensor, scb: torch.Tensor) -> "Int8Params":
        """Makes this parameter the int8 codes `codes` with their row scales, in place (modules keep this
        object)."""
        self.requires_grad_(False)  # integer data cannot require grad
        self.data = codes
        self.CB, self.SCB = codes, scb
        return self

    def cpu(self):
        return self.to(device="cpu")

    def cuda(self, device=None, non_blocking: bool = False):
        return self.to(device="cuda" if device is None else device, non_blocking=non_blocking)

    def to(self, *args, **kwargs):
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        quantized = self.dtype == torch.int8
        if not quantized and not self.has_fp16_weights and device is not None and device.type != "meta":
            return self._quantize(device)
        # A dtype applies to a float weight only: codes stay int8 (converting them would make them numbers).
        moved = super().to(device=device, dtype=None if quantized else dtype, non_blocking=non_blocking)
        new = Int8Params(moved, requires_grad=self.requires_grad, has_fp16_weights=self.has_fp16_weights)
        if quantized:
            scb = self.SCB
            if device is not None and scb is not None and scb.device.type != "meta":
                scb = scb.to(device, non_blocking=non_blocking)
            new.SCB = scb
        return new


class _Int8WeightModule:
    """What Linear8bitLt and Embedding8bit share: the codes and scales follow the module across devices, and
    state dicts hold bitsandbytes' keys (weight, SCB, weight_format), checked on load."""

    def _weight_shape(self) -> tuple[int, int]:
        raise NotImplementedError

    def _scales(self) -> Optional[torch.Tensor]:
        """The weight's row scales when it holds int8 codes (None otherwise)."""
        if self.weight.dtype != torch.int8:
            return None
        scb = getattr(self.weight, "SCB", None)
        state = getattr(self, "state", None)
        return scb if scb is not None or state is None else state.SCB

    def _sync_state(self) -> None:
        state = getattr(self, "state", None)
        if state is not None and self.weight.dtype == torch.int8:
            state.CB, state.SCB = self.weight, self._scales()

    def _apply(self, fn, recurse=True):
        # Module.to() gives the parameter the moved codes by .data, which leaves its scales behind.
        super()._apply(fn, recurse)
        w = self.weight
        if isinstance(w, Int8Params) and w.dtype == torch.int8:
            w.CB = w.data
            if w.SCB is not None and w.SCB.device != w.device and w.SCB.device.type != "meta":
                w.SCB = w.SCB.to(w.device)
        state = getattr(self, "state", None)
        if state is not None and state.CB is not None:  # codes of an earlier call follow the weight
            if w.dtype == torch.int8:
                self._sync_state()
            else:
                state.CB, state.SCB = state.CB.to(w.device), state.SCB.to(w.device)
        return self

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        scb = self._scales()
        if scb is not None:
            destination[prefix + "SCB"] = scb if keep_vars else scb.detach()
            destination[prefix + "weight_format"] = torch.tensor(0, dtype=torch.uint8)  # "row", bitsandbytes' only

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        wkey, skey, fkey = prefix + "weight", prefix + "SCB", prefix + "weight_format"
        others = {k: v for k, v in state_dict.items() if k not in (skey, fkey)}
        if fkey in state_dict and not _weight_format_ok(state_dict[fkey], fkey, error_msgs):
            others.pop(wkey, None)  # codes in another layout: the weight stays as it was
            super()._load_from_state_dict(others, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                          error_msgs)
            if wkey in missing_keys:
                missing_keys.remove(wkey)
            return
        weight, scb = state_dict.get(wkey), state_dict.get(skey)
        is_tensor = isinstance(weight, torch.Tensor)
        codes_in = is_tensor and weight.dtype == torch.int8
        floats_into_codes = is_tensor and weight.is_floating_point() and self._scales() is not None
        if scb is None and not codes_in and not floats_into_codes:  # a float weight, or none: torch's rules
            super()._load_from_state_dict(others, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                          error_msgs)
            return
        others.pop(wkey, None)
        super()._load_from_state_dict(others, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if weight is not None and wkey in missing_keys:
            missing_keys.remove(wkey)
        if codes_in and scb is None:  # (a shard may hold the codes alone: loaded over the module's own scales)
            missing_keys.append(skey)
        self._load_weight(weight, scb, wkey, skey, local_metadata.get("assign_to_params_buffers", False), error_msgs)

    def _load_weight(self, weight, scb, wkey: str, skey: str, assign: bool, error_msgs: list) -> None:
        """Loads int8 codes and their scales (either may be absent where the module holds its own), or a float weight
        into a quantized module (quantized here); or reports through error_msgs why not, leaving the weight as it
        was."""
        old, kind = self.weight, type(self).__name__
        not_tensors = [k for k, v in ((wkey, weight), (skey, scb)) if v is not None and not isinstance(v, torch.Tensor)]
        if not_tensors:  # as torch reports a parameter's
            error_msgs.extend(f'While copying the parameter named "{k}", expected torch.Tensor or Tensor-like object '
                              "from checkpoint but received something else" for k in not_tensors)
            return
        if getattr(getattr(self, "state", None), "has_fp16_weights", False):
            error_msgs.append(f"while loading {wkey}: the checkpoint holds a quantized weight (int8 codes and {skey}), "
                              f"but this {kind} has has_fp16_weights=True, which keeps a float weight; make it with "
                              "has_fp16_weights=False")
            return
        shape, own_scb = self._weight_shape(), self._scales()
        if weight is None and own_scb is None:
            error_msgs.append(f"Loading a quantized checkpoint into non-quantized {kind}: {skey} comes without the "
                              f"int8 codes of {wkey}, and the module holds none")
            return
        if weight is not None and weight.is_floating_point() and scb is not None:
            where = (f"Loading a quantized checkpoint into non-quantized {kind}: " if own_scb is None else
                     f"while loading {skey}: ")
            error_msgs.append(f"{where}the checkpoint has row scales ({skey}), but {wkey} is {_name(weight.dtype)}, "
                              "not int8 codes")
            return
        if weight is not None and weight.dtype not in (torch.int8, *_FLOATS):
            error_msgs.append(f"while loading {wkey}: expected int8 codes or a float32/float16/bfloat16 weight, got "
                              f"{_name(weight.dtype)}")
            return
        if weight is not None and tuple(weight.shape) != shape:
            error_msgs.append(f"size mismatch for {wkey}: copying a param with shape {tuple(weight.shape)} from "
                              f"checkpoint, the shape in current model is {shape}.")
            return
        if weight is not None and weight.dtype == torch.int8 and scb is None and own_scb is None:
            error_msgs.append(f"while loading {wkey}: the checkpoint holds int8 codes without {skey}, their row "
                              f"scales (a Linear8bitLt state dict has both)")
            return
        if scb is not None:
            problem = _scale_problem(scb, shape[0])
            if problem:
                error_msgs.append(f"while loading {skey}: {problem}")
                return
        device = None if assign or old.device.type == "meta" else old.device  # None: the checkpoint's
        try:
            codes, scales = self._new_codes(weight, scb, own_scb, device, copy=not assign)
        except Exception as e:  # a meta checkpoint has nothing to copy: reported as torch reports a parameter's
            error_msgs.append(f'While copying the parameter named "{wkey}" and its {skey} to {device}, an exception '
                              f"occurred : {e.args}.")
            return
        if assign or not isinstance(old, Int8Params):
            self.weight = Int8Params(codes, requires_grad=False, has_fp16_weights=False)._hold(codes, scales)
        else:  # optimizers and hooks hold the Parameter object: it stays
            old._hold(codes, scales)
        if getattr(self, "state", None) is not None:
            self.state.reset_grads()  # codes of the old weight; the next call takes the new ones

    def _new_codes(self, weight, scb, own_scb, device, copy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, scales) to hold, on `device` (None: where the checkpoint's are), copies of the checkpoint's or
        (assign) the tensors themselves where no conversion is needed."""
        if weight is not None and weight.is_floating_point():  # a float weight into a quantized module
            codes, scales, _ = torch.ops.bnb.int8_vectorwise_quant(weight.to(device or weight.device).contiguous(),
                                                                   0.0)
            return codes, scales
        codes = self.weight.data if weight is None else weight.to(device or weight.device, copy=copy)
        scales = own_scb if scb is None else scb.reshape(-1).to(device or scb.device, torch.float32, copy=copy)
        if scales.device != codes.device:
            scales = scales.to(codes.device)
        return codes, scales


def _weight_format_ok(value, key: str, error_msgs: list) -> bool:
    """Whether bitsandbytes' weight_format entry says "row": 0 or "row" (a tensor, int or str; a meta tensor, which
    has no value, is taken as such); otherwise says why in error_msgs. The other (GPU tile) layouts, of
    bitsandbytes before 0.45, are read by neither it nor bnb."""
    v = value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        if value.device.type == "meta":
            return True
        v = value.item()
    name = INVERSE_LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING.get(v) if isinstance(v, int) and not isinstance(v, bool) else v
    if name != "row":
        error_msgs.append(f"while loading {key}: expected 0 ('row', row-major int8 codes), got {value!r}; only the "
                          "row layout is supported")
    return name == "row"


def maybe_rearrange_weight(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                           error_msgs) -> None:
    """bitsandbytes' load_state_dict pre-hook for Linear8bitLt: takes the weight_format entry out of a state dict that
    has a weight, and raises ValueError naming it unless it says "row" (Linear8bitLt reads the entry itself)."""
    if state_dict.get(f"{prefix}weight") is None:
        return
    key = f"{prefix}weight_format"
    if key in state_dict:
        problems = []
        if not _weight_format_ok(state_dict.pop(key), key, problems):
            raise ValueError(problems[0])


def _scale_problem(scb: torch.Tensor, rows: int) -> str:
    """What is wrong with a checkpoint's row scales, or ""."""
    if scb.dtype not in _FLOATS:
        return f"expected float32 row scales, got {_name(scb.dtype)}"
    if scb.numel() != rows:
        return f"expected {rows} row scales (one per row of the weight), got {scb.numel()} (shape {list(scb.shape)})"
    if scb.device.type != "meta" and bool((scb < 0).any()):
        return "a row scale is negative (they are the rows' absolute maxima)"
    return ""


class Linear8bitLt(_Int8WeightModule, nn.Linear):
    """nn.Linear by LLM.int8(): the input quantized row-wise to int8 at each call, times the int8 weight; with
    threshold > 0 the input's outlier columns (any |x| >= threshold) are multiplied in the input's precision.
    has_fp16_weights=False quantizes the weight on .to(device) (inference; the usual choice); True keeps it a
    trainable float weight, quantized at each call. The output has the input's dtype."""

    def __init__(self, input_features: int, output_features: int, bias: bool = True, has_fp16_weights: bool = True,
                 threshold: float = 0.0, index=None, device=None):
        super().__init__(input_features, output_features, bias, device)
        self.state = MatmulLtState()
        self.index = index
        self.state.threshold = threshold
        self.state.has_fp16_weights = has_fp16_weights
        if threshold > 0.0 and not has_fp16_weights:
            self.state.use_pool = True
        self.weight = Int8Params(self.weight.data, has_fp16_weights=has_fp16_weights, requires_grad=has_fp16_weights)

    def _weight_shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    def init_8bit_state(self) -> None:
        """The weight's codes and scales into the state (where bitsandbytes' forward reads them)."""
        self.state.CB, self.state.SCB = self.weight.CB, self.weight.SCB

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Each attribute read once, the parameters from their dict: nn.Module.__getattr__ costs ~1.3 us a name, and
        # an Int8Params' dtype ~0.4 us, against ~45 us for a whole small layer's call. A parametrized weight
        # (torch.nn.utils.parametrize) is a property instead, outside the dict.
        state, params = self.state, self._parameters
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        state.is_training = self.training
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise RuntimeError(f"{type(self).__name__}: input has {x.shape[-1] if x.dim() else 0} features (shape "
                               f"{list(x.shape)}), the layer takes {self.in_features}")
        if not state.has_fp16_weights:
            dtype = weight.dtype
            if isinstance(weight, Int8Params) and dtype != torch.int8:
                weight._quantize(weight.device)  # never moved: quantized now (in place), as bitsandbytes does
                dtype = weight.dtype
            if dtype == torch.int8:
                scb = getattr(weight, "SCB", None)
                scb = scb if scb is not None else state.SCB  # _scales()
                if scb is None:
                    raise RuntimeError(f"{type(self).__name__}: the weight holds int8 codes without their row scales "
                                       "(weight.SCB); load a checkpoint with its SCB, or quantize a float weight by "
                                       "moving the module (.to(device))")
                state.CB, state.SCB = weight, scb  # _sync_state()
        return matmul(x, weight, bias=bias, state=state)


class Embedding8bit(_Int8WeightModule, nn.Embedding):
    """nn.Embedding with an int8 table (row-wise scales, as Linear8bitLt's weight): quantized on .to(device); a
    lookup dequantizes only the rows it reads, to the table's original dtype."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype=None):
        super().__init__(num_embeddings, embedding_dim, device=device, dtype=dtype)
        self.dtype = self.weight.data.dtype
        self.weight = Int8Params(self.weight.data, has_fp16_weights=False, requires_grad=False)

    def _weight_shape(self) -> tuple[int, int]:
        return (self.num_embeddings, self.embedding_dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        scales = self._scales()
        if scales is None:
            raise RuntimeError(f"{type(self).__name__}: the table is not quantized yet (or has no row scales); move "
                               "the module to a device first (.to('cpu'), .cuda(), ...), which quantizes it")
        # embedding() rather than indexing: an index out of range (negative ones too) is an IndexError.
        rows = nn.functional.embedding(input, self.weight)
        row_scales = nn.functional.embedding(input, scales.reshape(-1, 1))
        return torch.ops.bnb.int8_vectorwise_dequant(rows, row_scales.reshape(-1)).to(self.dtype)


class StableEmbedding(nn.Embedding):
    """nn.Embedding for stable training (bitsandbytes'): Xavier-uniform initialization and a LayerNorm after the
    lookup, computed in the default dtype. bitsandbytes also registers the weight for 32-bit optimizer state with
    its optimizers, which bnb does not have yet."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Optional[torch.Tensor] = None, device=None, dtype=None) -> None:
        # By keyword: nn.Embedding took _freeze before device (bitsandbytes passes device and dtype positionally).
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, device=device, dtype=dtype)
        self.norm = nn.LayerNorm(embedding_dim, device=device)

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)
        self._fill_padding_idx_with_zero()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        emb = nn.functional.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                                      self.scale_grad_by_freq, self.sparse)
        return self.norm(emb.to(torch.get_default_dtype())).to(self.weight.dtype)  # the norm in full precision


class Embedding(nn.Embedding):
    """nn.Embedding with bitsandbytes' Xavier-uniform initialization (its optimizers keep 32-bit state for it)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Optional[torch.Tensor] = None, device=None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, device=device)

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)
        self._fill_padding_idx_with_zero()


class OutlierAwareLinear(nn.Linear):
    """A Linear whose subclass quantizes the weight knowing the input's outlier dimensions: on the first call the
    OutlierTracer (initialized on the model and run once) gives them, quantize_weight(w, outlier_idx) replaces the
    weight, and every call returns forward_with_outliers(x, outlier_idx). Both are the subclass's to write."""

    def __init__(self, input_features: int, output_features: int, bias: bool = True, device=None):
        super().__init__(input_features, output_features, bias, device)
        self.outlier_dim = None
        self.is_quantized = False

    def forward_with_outliers(self, x: torch.Tensor, outlier_idx):
        raise NotImplementedError("Please override the `forward_with_outliers(self, x, outlier_idx)` function")

    def quantize_weight(self, w: torch.Tensor, outlier_idx):
        raise NotImplementedError("Please override the `quantize_weights(self, w, outlier_idx)` function")

    def forward(self, x: torch.Tensor):
        if self.outlier_dim is None:
            tracer = OutlierTracer.get_instance()
            if not tracer.is_initialized():
                logger.warning("Please use OutlierTracer.initialize(model) before using the OutlierAwareLinear layer")
            self.outlier_dim = tracer.get_outliers(self.weight)
        if not self.is_quantized:
            with torch.no_grad():
                self.weight.copy_(self.quantize_weight(self.weight, self.outlier_dim))
            self.is_quantized = True
        return self.forward_with_outliers(x, self.outlier_dim)
