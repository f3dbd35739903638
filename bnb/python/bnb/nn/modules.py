"""Params4bit and the 4-bit modules. As in bitsandbytes, a weight is quantized when its module moves to a device
(`.to(...)`, `.cuda()`, `.cpu()`), and state dicts carry bitsandbytes' keys (weight, weight.absmax,
weight.quant_map, weight.nested_*, weight.quant_state.bitsandbytes__<type>)."""

from __future__ import annotations

import copy
import logging
import math
from typing import Any, Optional

import torch
from torch import nn

from .. import config as bnb_config
from .. import cpu_layout
from .. import functional as F
from ..autograd import _wants_grad, matmul_4bit
from ..quant_state import QuantState


class Params4bit(nn.Parameter):
    """A weight that quantizes itself to 4 bits on its first move to a device, and then holds the packed codes
    (shape (n+1)//(2*itemsize) x 1, dtype quant_storage) with their QuantState."""

    def __new__(cls, data: Optional[torch.Tensor] = None, requires_grad: bool = False,
                quant_state: Optional[QuantState] = None, blocksize: Optional[int] = None,
                compress_statistics: bool = True, quant_type: str = "fp4", quant_storage: torch.dtype = torch.uint8,
                module: Optional[nn.Module] = None, bnb_quantized: bool = False, **kwargs) -> "Params4bit":
        if quant_type not in ("nf4", "fp4"):
            raise ValueError(f"Params4bit: quant_type must be 'nf4' or 'fp4', got {quant_type!r}")
        self = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        self.blocksize = 64 if blocksize is None else blocksize
        self.compress_statistics = compress_statistics
        self.quant_type = quant_type
        self.quant_state = quant_state
        self.quant_storage = quant_storage
        self.bnb_quantized = bnb_quantized
        self.module = module
        return self

    # What a Params4bit carries besides its data; pickling and copies keep all of it.
    _ATTRS = ("blocksize", "compress_statistics", "quant_type", "quant_state", "quant_storage", "bnb_quantized",
              "module")

    def _attrs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._ATTRS}

    def __getstate__(self):
        state = self._attrs()
        state["data"] = self.data
        state["requires_grad"] = self.requires_grad
        return state

    def __setstate__(self, state):
        for k in self._ATTRS:
            setattr(self, k, state[k])
        if "data" in state:
            self.requires_grad = state["requires_grad"]
            self.data = state["data"]
        cpu_layout.rebind(self)

    def __reduce_ex__(self, proto):
        # nn.Parameter's own reduction rebuilds a plain Parameter: a pickled module (torch.save(model)) would come
        # back with packed codes that no longer know they are codes, or a weight that never quantizes.
        return type(self), (self.data, self.requires_grad), self._attrs()

    def __deepcopy__(self, memo):
        # The copy belongs to the copy of its module when that module is being deep-copied (it is in memo then),
        # and to no module when the parameter is copied alone.
        module = memo.get(id(self.module)) if self.module is not None else None
        result = type(self).__new__(type(self), copy.deepcopy(self.data, memo), self.requires_grad,
                                    copy.deepcopy(self.quant_state, memo), self.blocksize, self.compress_statistics,
                                    self.quant_type, self.quant_storage, module, self.bnb_quantized)
        cpu_layout.rebind(result)
        return result

    @classmethod
    def from_prequantized(cls, data: torch.Tensor, quantized_stats: dict[str, Any], requires_grad: bool = False,
                          device="cpu", module: Optional[nn.Module] = None, **kwargs) -> "Params4bit":
        """A quantized weight from its packed codes and the stats of a state dict (keys without "weight.")."""
        state, problems = QuantState.checked_from_dict(quantized_stats, device=device)
        if state is not None and state.quant_type is None:
            problems = [("quant_type", "expected 'nf4' or 'fp4' (a 4-bit state), got None")]
        if not problems:
            problems = [(suffix or "data", what) for suffix, what in state.size_problems_4bit(data)]
        if problems:
            raise ValueError("Params4bit.from_prequantized: " + "; ".join(f"{k}: {what}" for k, what in problems))
        data = data.to(device)
        return cls(data, requires_grad=requires_grad, module=module)._hold(data, state)

    def _quantize(self, device) -> "Params4bit":
        w = self.data.contiguous().to(device)
        packed, state = F.quantize_4bit(w, blocksize=self.blocksize, compress_statistics=self.compress_statistics,
                                        quant_type=self.quant_type, quant_storage=self.quant_storage)
        if not torch._has_compatible_shallow_copy_type(self, packed):  # else .data = packed fails, saying less
            raise RuntimeError(f"Params4bit: a {self.device.type} parameter cannot hold codes on {packed.device.type}: "
                               f"torch counts them as incompatible tensor types. A PrivateUse1 device's library "
                               f"registers aten::_has_compatible_shallow_copy_type for them (see torch's TensorImpl.h)")
        return self._hold(packed, state)  # modules keep this object (param.data = result): the state must live on it

    def _hold(self, packed: torch.Tensor, state: QuantState) -> "Params4bit":
        """Makes this parameter the packed codes `packed` with their state (and its module's quant_state that
        state): the one place a Params4bit becomes quantized, in place."""
        self.data = packed
        self.quant_state, self.blocksize, self.compress_statistics = state, state.blocksize, state.nested
        self.quant_type, self.quant_storage, self.bnb_quantized = state.quant_type, packed.dtype, True
        if self.module is not None:
            self.module.quant_state = state
        return self

    def _like(self, data: torch.Tensor) -> "Params4bit":
        """A Params4bit over `data` with this one's attributes (its quant state the same object)."""
        return type(self).__new__(type(self), data, self.requires_grad, **self._attrs())

    def __copy__(self):
        return self._like(self.data)

    # FSDP2 shards a parameter with torch.chunk / torch.split: the shards stay Params4bit with the quant state, as in
    # bitsandbytes. Every other op returns plain tensors, as nn.Parameter's own __torch_function__ does.
    _SHARDING = (torch.chunk, torch.split, torch.Tensor.chunk, torch.Tensor.split)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        if func in cls._SHARDING and isinstance(args[0], Params4bit):
            return tuple(args[0]._like(piece) for piece in result)
        return result

    # Module.half() / .float() / ... convert parameters by these methods: once quantized, the packed codes keep their
    # storage type (as .to(dtype) does) instead of being converted as numbers.
    def half(self):
        return self.to(torch.float16)

    def bfloat16(self):
        return self.to(torch.bfloat16)

    def float(self):
        return self.to(torch.float32)

    def double(self):
        return self.to(torch.float64)

    def cpu(self):
        return self.to(device="cpu")

    def cuda(self, device=None, non_blocking: bool = False):
        return self.to(device="cuda" if device is None else device, non_blocking=non_blocking)

    def to(self, *args, **kwargs):
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and device.type != "meta" and not self.bnb_quantized:
            return self._quantize(device)
        if device is not None and device.type != "cpu" and cpu_layout.layout_of(self.quant_state) is not None:
            cpu_layout.restore(self)  # the tiled CPU layout stays on the CPU: bitsandbytes' bytes move
        if self.quant_state is not None and device is not None:
            self.quant_state.to(device)
        # dtype applies to the unquantized weight only: packed codes keep their storage type.
        moved = super().to(device=device, dtype=None if self.bnb_quantized else dtype, non_blocking=non_blocking)
        return Params4bit(moved, self.requires_grad, self.quant_state, self.blocksize, self.compress_statistics,
                          self.quant_type, self.quant_storage, self.module, self.bnb_quantized)


def _quant_state_property(name: str, get, nested: bool) -> property:
    """Params4bit.<name>: the quant state's field, as bitsandbytes 0.50 has it for FSDP, which resolves state-dict keys
    such as "weight.absmax" by getattr on the weight. A property, not __getattr__: torch.compile traces properties
    of tensor subclasses without a graph break."""
    def fget(self):
        qs = self.__dict__.get("quant_state")
        if qs is not None and (not nested or qs.state2 is not None):
            return get(qs)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
    return property(fget)


for _name, _get, _nested in (
        ("absmax", lambda qs: qs.absmax, False),
        ("code", lambda qs: qs.code, False),
        ("quant_map", lambda qs: qs.code, False),
        ("offset", lambda qs: qs.offset, False),
        ("state2", lambda qs: qs.state2, False),
        ("nested_offset", lambda qs: qs.offset, False),
        ("nested_absmax", lambda qs: qs.state2.absmax, True),
        ("nested_blocksize", lambda qs: qs.state2.blocksize, True),
        ("nested_quant_map", lambda qs: qs.state2.code, True),
        ("nested_dtype", lambda qs: qs.state2.dtype, True)):
    setattr(Params4bit, _name, _quant_state_property(_name, _get, _nested))


def _restore_weight(module: nn.Module) -> None:
    """Makes module.weight a Params4bit again where something replaced it by a plain Parameter over the packed codes
    (FSDP, or a user's assignment), from the module's quant_state: as bitsandbytes'
    fix_4bit_weight_quant_state_from_module."""
    state = getattr(module, "quant_state", None)
    w = module.weight
    if isinstance(w, Params4bit) or state is None:
        return
    want = (math.prod(state.shape) + 1) // 2
    if cpu_layout.layout_of(state) is not None:
        want = cpu_layout.code_bytes(*state.shape)
    if w.numel() * w.element_size() != want:
        return  # not packed codes of this state: leave it as it is
    module.weight = Params4bit(w.data, requires_grad=w.requires_grad, module=module)._hold(w.data, state)


def _state_of(module: nn.Module) -> QuantState:
    weight = module.weight
    if not isinstance(weight, Params4bit):
        _restore_weight(module)
        weight = module.weight
    state = getattr(weight, "quant_state", None) or getattr(module, "quant_state", None)
    if state is None:
        raise RuntimeError(f"{type(module).__name__}: the weight is not quantized yet; move the module to a device "
                           f"first (.to('cpu'), .cuda(), ...), which quantizes it")
    return state


# bitsandbytes reports its modules' performance advice through logging (bitsandbytes.nn.modules), where its tests
# and users' log configuration look for it; ours goes to the logger named after this module.
logger = logging.getLogger(__name__)


def _log_fp16_input(single_row: bool) -> None:
    """bitsandbytes' advice for float16 input to a float32-compute Linear4bit, on each layer's first call as there.
    Not while torch.compile traces: a logging call would break its graph."""
    if torch.compiler.is_compiling():
        return
    slow = "slow inference." if single_row else "slow inference or training speed."
    logger.warning("Input type into Linear4bit is torch.float16, but bnb_4bit_compute_dtype=torch.float32 (default). "
                   f"This will lead to {slow}")


class _Quantized4bitModule:
    """State-dict behaviour shared by the 4-bit modules: bitsandbytes' keys out, and in."""

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        with cpu_layout.LOCK:  # the weight's data and state as one pair
            self._save_quantized(destination, prefix, keep_vars)

    def _save_quantized(self, destination, prefix, keep_vars):
        _restore_weight(self)
        state = getattr(self.weight, "quant_state", None)
        if keep_vars and cpu_layout.layout_of(state) is not None:
            cpu_layout.restore(self.weight)  # the caller gets the Parameter itself: bitsandbytes' bytes again
            state = self.weight.quant_state
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if cpu_layout.layout_of(state) is not None:  # bitsandbytes' bytes, bit for bit; the weight stays repacked
            destination[prefix + "weight"] = cpu_layout.plain_form(self.weight.data, state)[0]
        if state is not None:
            for k, v in state.as_dict(packed=True).items():
                destination[prefix + "weight." + k] = v if keep_vars else v.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "weight"
        stats = {k[len(key) + 1:]: v for k, v in state_dict.items() if k.startswith(key + ".")}
        if not stats or key not in state_dict:  # a float weight (or none): torch's rules, which copy it in
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                          error_msgs)
            return
        # Everything but the weight by torch's rules; the weight and its statistics here, where they stay a
        # Params4bit (torch's assign=True would make it a plain Parameter, whose codes .half() then converts).
        others = {k: v for k, v in state_dict.items() if k != key and not k.startswith(key + ".")}
        super()._load_from_state_dict(others, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if key in missing_keys:
            missing_keys.remove(key)
        self._load_quantized_weight(state_dict[key], stats, key, local_metadata.get("assign_to_params_buffers", False),
                                    missing_keys, unexpected_keys, error_msgs)

    def _load_quantized_weight(self, data, stats, key, assign, missing_keys, unexpected_keys, error_msgs) -> None:
        """Loads packed codes `data` and their statistics (state-dict keys key + "." + name) into self.weight, or
        reports through torch's lists why not, leaving the weight as it was. As torch's load: the weight keeps its
        Parameter object and device (unless it is on meta) and gets copies, or with assign=True becomes the given
        tensors themselves."""
        old = self.weight
        not_tensors = [k for k, v in ((key, data), *((f"{key}.{k}", v) for k, v in stats.items()))
                       if not isinstance(v, torch.Tensor)]
        if not_tensors:  # as torch reports a parameter's
            error_msgs.extend(f"While copying the parameter named \"{k}\", expected torch.Tensor or Tensor-like "
                              "object from checkpoint but received something else" for k in not_tensors)
            return
        try:
            missing, unexpected = QuantState.packed_keys_check(stats, getattr(old, "quant_type", "nf4"))
        except ValueError as e:
            error_msgs.append(f"while loading {key}: its quant_state metadata is unreadable: {e}")
            return
        unexpected_keys.extend(f"{key}.{k}" for k in unexpected)
        if missing:
            missing_keys.extend(f"{key}.{k}" for k in missing)
            return
        stats = {k: v for k, v in stats.items() if k not in unexpected}
        if not assign:
            device = data.device if old.device.type == "meta" else old.device
            try:
                stats = {k: v.to(device, copy=True) for k, v in stats.items()}
                data = data.to(device, copy=True)
            except Exception as e:  # a meta checkpoint has nothing to copy: reported as torch reports a parameter's
                error_msgs.append(f'While copying the parameter named "{key}" and its quant state to {device}, an '
                                  f"exception occurred : {e.args}.")
                return
        state, problems = QuantState.checked_from_dict(stats, device=data.device)
        if problems:
            error_msgs.extend(f"while loading {key}.{name}: {what}" for name, what in problems)
            return
        if tuple(state.shape) != self._weight_shape():
            error_msgs.append(f"size mismatch for {key}: the checkpoint holds a 4-bit weight of shape "
                              f"{tuple(state.shape)}, the current model's is {self._weight_shape()}")
            return
        problems = state.size_problems_4bit(data)
        for suffix, what in problems:  # a truncated checkpoint: refused here, not at some later forward
            error_msgs.append(f"size mismatch for {key}{'.' + suffix if suffix else ''}: {what}")
        if problems:
            return
        if assign or not isinstance(old, Params4bit):
            # Made over data: a parameter's device cannot change by .data (a meta checkpoint with assign=True)
            self.weight = Params4bit(data, requires_grad=old.requires_grad, module=self)._hold(data, state)
        else:  # optimizers and hooks hold the Parameter object: it stays
            old.module = self
            old._hold(data, state)
        self.quant_storage = data.dtype


class Linear4bit(_Quantized4bitModule, nn.Linear):
    """nn.Linear with a 4-bit weight (QLoRA). Load fp16/bf16/fp32 weights, then `.to(device)` quantizes them.
    A single row of input takes gemv_4bit; batches dequantize and run a dense matmul in compute_dtype.
    compute_dtype=None is settled by the first forward, as in bitsandbytes: a float32 or bfloat16 input's dtype
    becomes the compute dtype for every later call; a float16 input leaves it None (computed in float16) with a
    warning that the default is float32."""

    def __init__(self, input_features: int, output_features: int, bias: bool = True, compute_dtype=None,
                 compress_statistics: bool = True, quant_type: str = "fp4", quant_storage=torch.uint8, device=None):
        super().__init__(input_features, output_features, bias, device)
        self.weight = Params4bit(self.weight.data, requires_grad=False, compress_statistics=compress_statistics,
                                 quant_type=quant_type, quant_storage=quant_storage, module=self)
        self.compute_dtype = compute_dtype
        self.compute_type_is_set = compute_dtype is not None
        self.quant_state = None
        self.quant_storage = quant_storage

    def _weight_shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    def set_compute_type(self, x: torch.Tensor) -> None:
        """bitsandbytes' first-call rule (see the class doc); forward calls it once."""
        if x.dtype in (torch.float32, torch.bfloat16):
            self.compute_dtype = x.dtype
        elif x.dtype == torch.float16 and self.compute_dtype in (None, torch.float32):
            _log_fp16_input(single_row=x.numel() == x.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():  # as nn.Linear; before the first call settles compute_dtype
            raise RuntimeError(f"{type(self).__name__}: input must be a floating-point tensor, got "
                               f"{str(x.dtype).removeprefix('torch.')}")
        if x.shape[-1] != self.in_features:
            # Checked here: matmul_4bit would take an input of out_features columns as one for a [K, N] weight
            # (bitsandbytes' deprecated form) and answer with only a DeprecationWarning.
            raise RuntimeError(f"{type(self).__name__}: input has {x.shape[-1]} features (shape {list(x.shape)}), "
                               f"the layer takes {self.in_features}")
        in_dtype = x.dtype
        if x.device.type == "cpu" and not torch.compiler.is_compiling():
            # The layout this call uses and the codes in it, taken together (another thread may change the layout
            # after). One pass under the lock: for a small layer's token this Python costs as much as the product.
            with cpu_layout.LOCK, torch._C.DisableTorchFunctionSubclass():
                state = _state_of(self)  # first: an unquantized weight is refused before anything is settled
                x = self._in_compute_dtype(x)
                bias = self.bias
                state = self._settle_cpu_layout(x, state, bias)
                layout = cpu_layout.layout_of(state)
                tiled = layout is not None and x.dtype in F._FLOATS and x.numel() > 0
                weight = None if tiled else self.weight.detach()
            if tiled:
                y = cpu_layout.product(x, layout.codes, state, bias)  # what matmul_4bit would call
                return y if y.dtype == in_dtype else y.to(in_dtype)
        else:
            state = _state_of(self)
            x = self._in_compute_dtype(x)
            weight = self.weight
        # The bias as it is: matmul_4bit adds it with one rounding, alike in eager and compiled code.
        y = matmul_4bit(x, weight, quant_state=state, bias=self.bias)
        return y if y.dtype == in_dtype else y.to(in_dtype)

    def _in_compute_dtype(self, x: torch.Tensor) -> torch.Tensor:
        """x in the compute dtype, which the first call settles (set_compute_type)."""
        if not self.compute_type_is_set:
            self.set_compute_type(x)
            self.compute_type_is_set = True
        if self.compute_dtype is not None and self.compute_dtype != x.dtype:
            x = x.to(self.compute_dtype)
        return x

    def _settle_cpu_layout(self, x: torch.Tensor, state: QuantState, bias: Optional[torch.Tensor]) -> QuantState:
        """The weight's layout for this call (cpu_layout), and the quant state to use: repacked in place for
        inference (eval mode, no gradient wanted), as bitsandbytes repacks; back to bitsandbytes' bytes for a call
        that wants gradients or with knob cpu.pack_4bit off. Training mode repacks nothing: a no-grad pass inside a
        training loop would otherwise repack and restore the weights at every step."""
        grad = _wants_grad(x, bias)
        if cpu_layout.layout_of(state) is not None:
            if grad or not bnb_config.get("cpu.pack_4bit"):
                cpu_layout.restore(self.weight)
                return self.weight.quant_state
            return state
        if (self.training or grad or state is not self.weight.quant_state
                or not cpu_layout.repackable(self.weight, x.dtype) or not cpu_layout.repack(self.weight)):
            return state
        return self.weight.quant_state


class LinearFP4(Linear4bit):
    def __init__(self, input_features, output_features, bias=True, compute_dtype=None, compress_statistics=True,
                 quant_storage=torch.uint8, device=None):
        super().__init__(input_features, output_features, bias, compute_dtype, compress_statistics, "fp4",
                         quant_storage, device)


class LinearNF4(Linear4bit):
    def __init__(self, input_features, output_features, bias=True, compute_dtype=None, compress_statistics=True,
                 quant_storage=torch.uint8, device=None):
        super().__init__(input_features, output_features, bias, compute_dtype, compress_statistics, "nf4",
                         quant_storage, device)


class Embedding4bit(_Quantized4bitModule, nn.Embedding):
    """nn.Embedding with a 4-bit table. A lookup dequantizes only the rows it reads: by bytes and blocks when
    embedding_dim is a multiple of the blocksize, element by element otherwise (bitsandbytes dequantizes the whole
    table then, and warns that it is slow)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=None, quant_type: str = "fp4",
                 quant_storage=torch.uint8, device=None):
        super().__init__(num_embeddings, embedding_dim, device=device, dtype=dtype)
        self.dtype = self.weight.data.dtype
        self.weight = Params4bit(self.weight.data, requires_grad=False, compress_statistics=False,
                                 quant_type=quant_type, quant_storage=quant_storage, module=self)
        self.quant_state = None
        self.quant_storage = quant_storage
        if embedding_dim % self.weight.blocksize != 0:  # as bitsandbytes logs it
            logger.warning(f"Embedding size {embedding_dim} is not divisible by block size {self.weight.blocksize}: "
                           "lookups dequantize element by element. This will lead to slow inference.")

    def _weight_shape(self) -> tuple[int, int]:
        return (self.num_embeddings, self.embedding_dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        state = _state_of(self)
        dim = self.embedding_dim
        if input.numel() == 0:
            return torch.empty(*input.shape, dim, dtype=self.dtype, device=input.device)
        if dim % state.blocksize == 0:
            # embedding() rather than indexing: an index out of range (negative ones too) is an IndexError.
            table = self.weight.data.view(torch.uint8).reshape(self.num_embeddings, dim // 2)
            rows = nn.functional.embedding(input, table)
            absmax = nn.functional.embedding(input, F._absmax_of(state).reshape(self.num_embeddings, -1))
            # In the state's dtype, then self.dtype, as the whole-table path (and bitsandbytes) rounds.
            return torch.ops.bnb.dequantize_4bit(rows.reshape(-1), absmax.reshape(-1), state.blocksize,
                                                 state.quant_type, [*input.shape, dim], state.dtype).to(self.dtype)
        # Rows straddle blocks and may start mid-byte: each element's code and block by index. The row offsets
        # come through embedding(), which checks the indices as the other path does.
        starts = torch.arange(self.num_embeddings, device=input.device).unsqueeze(1) * dim
        flat = nn.functional.embedding(input, starts) + torch.arange(dim, device=input.device)
        byte = self.weight.data.view(torch.uint8).reshape(-1)[flat >> 1].long()
        codes = torch.where((flat & 1) == 1, byte & 0xF, byte >> 4)
        # absmax flat: a checkpoint may hold it as [blocks, 1], which indexing would broadcast into the result.
        values = F.get_4bit_type(state.quant_type, device=input.device)[codes] * F._absmax_of(state).reshape(-1)[
            flat // state.blocksize]
        # One float32 product rounded to the state's dtype, then self.dtype: the kernels' and the other path's bits.
        return values.to(state.dtype).to(self.dtype)


class EmbeddingFP4(Embedding4bit):
    def __init__(self, num_embeddings, embedding_dim, dtype=None, quant_storage=torch.uint8, device=None):
        super().__init__(num_embeddings, embedding_dim, dtype, "fp4", quant_storage, device)


class EmbeddingNF4(Embedding4bit):
    def __init__(self, num_embeddings, embedding_dim, dtype=None, quant_storage=torch.uint8, device=None):
        super().__init__(num_embeddings, embedding_dim, dtype, "nf4", quant_storage, device)


# bitsandbytes keeps every module in bitsandbytes.nn.modules, with a few helpers; code that imports them from there
# ports too.
from .modules8bit import (  # noqa: E402,F401
    Embedding, Embedding8bit, Int8Params, Linear8bitLt, OutlierAwareLinear, StableEmbedding, maybe_rearrange_weight)
from ..functional import has_avx512bf16  # noqa: E402,F401
from ..utils import INVERSE_LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING, OutlierTracer  # noqa: E402,F401


def fix_4bit_weight_quant_state_from_module(module: nn.Module) -> None:
    """bitsandbytes' name for what Linear4bit and Embedding4bit do before each forward: where module.weight lost its
    quant_state (FSDP, or an assignment of a plain Parameter), makes it a Params4bit again from module.quant_state."""
    _restore_weight(module)


def __getattr__(name: str):
    if name == "GlobalOptimManager":  # bitsandbytes imports it here; bnb.optim loads on first use
        from ..optim import GlobalOptimManager
        return GlobalOptimManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
