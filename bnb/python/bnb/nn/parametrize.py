"""4-bit quantization of any parameter (3-D MoE expert weights, ...) through torch.nn.utils.parametrize, with
bitsandbytes' API: the module keeps its parameter's name; reading it dequantizes the packed codes the parametrization
holds as `parametrizations.<name>.original`.

State dicts carry the packed codes under the parameter's own name and the quant state beside it, as Linear4bit's
(`<name>`, `<name>.absmax`, `<name>.quant_map`, `<name>.quant_state.bitsandbytes__<type>`, ...), as bitsandbytes
saves them. bitsandbytes loads them with replace_parameter_4bit_prequantized; here load_state_dict into a module
already parametrized takes them too, and a checkpoint's state is checked either way (QuantState.checked_from_dict).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, Optional

import torch
import torch.nn.utils.parametrize as P
from torch import nn

from .. import functional as F
from ..quant_state import QuantState


class Bnb4bitParametrization(nn.Module):
    """Dequantizes the packed codes it is given (the parameter's `original`) with its quant state, to the
    parameter's shape and dtype; no gradient flows to the codes."""

    def __init__(self, quant_state: QuantState):
        super().__init__()
        self.quant_state = quant_state

    @torch.no_grad()
    def forward(self, quantized_param: torch.Tensor) -> torch.Tensor:
        if self.quant_state.absmax.device != quantized_param.device:  # the module moved: its state follows
            self.quant_state.to(quantized_param.device)
        return F.dequantize_4bit(quantized_param, self.quant_state)


def _parameter(module: nn.Module, param_name: str) -> nn.Parameter:
    """module's parameter `param_name`, with bitsandbytes' errors (its words first, then ours)."""
    if not hasattr(module, param_name):
        raise AttributeError(f"Module does not have parameter '{param_name}' ({type(module).__name__} has "
                             f"{[name for name, _ in module.named_parameters(recurse=False)]})")
    param = getattr(module, param_name)
    if not isinstance(param, nn.Parameter):
        why = "it is parametrized already" if P.is_parametrized(module, param_name) else f"it is a {type(param)}"
        raise TypeError(f"Parameter '{param_name}' is not an instance of nn.Parameter ({why})")
    return param


def _state_problems(state: Optional[QuantState], problems: list[tuple[str, str]],
                    packed: torch.Tensor) -> list[tuple[str, str]]:
    """A checkpoint state's problems (from checked_from_dict), then whether it is a 4-bit state that fits `packed`:
    as (state-dict key suffix, "" for the packed codes; what is wrong) pairs."""
    if problems:
        return problems
    if state.quant_type is None:
        return [("quant_type", "expected 'nf4' or 'fp4' (a 4-bit state), got None")]
    return state.size_problems_4bit(packed)


def replace_parameter_4bit_prequantized(module: nn.Module, param_name: str, qs_dict: dict[str, Any],
                                        device: torch.device) -> None:
    """Parametrizes module.<param_name>, which already holds packed 4-bit codes (as loaded from a checkpoint), with
    the quant state in qs_dict (as_dict(packed=True)'s items, their keys with or without the "<name>." prefix).
    Raises ValueError naming every problem of the state, or of the codes' size, before changing the module."""
    param = _parameter(module, param_name)
    state, problems = QuantState.checked_from_dict(qs_dict, device=device)
    problems = _state_problems(state, problems, param)
    if problems:
        raise ValueError("replace_parameter_4bit_prequantized: " + "; ".join(
            f"{param_name}{'.' + key if key else ''}: {what}" for key, what in problems))
    P.register_parametrization(module, param_name, Bnb4bitParametrization(state), unsafe=True)
    _register_parametrization_hooks(module, param_name)


def replace_parameter_4bit(module: nn.Module, param_name: str, compress_statistics: bool = False,
                           quant_type: Literal["nf4", "fp4"] = "nf4", blocksize: Optional[int] = None) -> None:
    """Quantizes module.<param_name> (float32, float16 or bfloat16, any shape) to 4 bits (quantize_4bit's
    arguments) and parametrizes it, so that reading it dequantizes; for parameters that are not a Linear's weight,
    such as MoE expert tensors. The packed codes do not require grad. Experimental in bitsandbytes, as here."""
    param = _parameter(module, param_name)
    packed, state = F.quantize_4bit(param.data, blocksize=blocksize, compress_statistics=compress_statistics,
                                    quant_type=quant_type)
    setattr(module, param_name, nn.Parameter(packed, requires_grad=False))
    P.register_parametrization(module, param_name, Bnb4bitParametrization(state), unsafe=True)
    _register_parametrization_hooks(module, param_name)


def _enable_parametrization_cache(module: nn.Module, inputs: tuple[Any, ...]) -> None:
    P._cache_enabled += 1


def _disable_parametrization_cache(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    # Never below zero: with always_call this also runs when an earlier pre-hook failed before the increment, and a
    # negative count is truthy, which would keep the cache (every dequantized parameter) forever.
    P._cache_enabled = max(0, P._cache_enabled - 1)
    if not P._cache_enabled:
        P._cache = {}


def _register_parametrization_hooks(module: nn.Module, param_name: str) -> None:
    module.register_state_dict_post_hook(partial(_parametrized_state_dict_post_hook, param_name=param_name))
    module.register_load_state_dict_pre_hook(partial(_parametrized_load_state_dict_pre_hook, param_name=param_name))
    # A forward dequantizes each parameter once however often it reads it (parametrize's cache). always_call: a
    # forward that stops early (non-reentrant checkpointing's recompute does, by design) must still close the cache,
    # or it stays on, holding every dequantized parameter.
    module.register_forward_pre_hook(_enable_parametrization_cache)
    module.register_forward_hook(_disable_parametrization_cache, always_call=True)


def _parametrization(module: nn.Module, param_name: str) -> Bnb4bitParametrization:
    found = [p for p in module.parametrizations[param_name] if isinstance(p, Bnb4bitParametrization)]
    if not found:
        raise RuntimeError(f"{type(module).__name__}.{param_name} has no Bnb4bitParametrization")
    return found[0]


def _parametrized_state_dict_post_hook(module: nn.Module, state_dict: dict[str, Any], prefix: str,
                                       local_metadata: Any, *, param_name: str = "weight", **kwargs) -> None:
    """The packed codes under the parameter's own name, and its quant state's items beside them."""
    original_key = f"{prefix}parametrizations.{param_name}.original"
    if original_key not in state_dict:
        return
    state_dict[prefix + param_name] = state_dict.pop(original_key)
    for k, v in _parametrization(module, param_name).quant_state.as_dict(packed=True).items():
        state_dict[f"{prefix}{param_name}.{k}"] = v


def _parametrized_load_state_dict_pre_hook(module: nn.Module, state_dict: dict[str, Any], prefix: str,
                                           local_metadata: Any, strict: bool, missing_keys: list[str],
                                           unexpected_keys: list[str], error_msgs: list[str], *,
                                           param_name: str = "weight") -> None:
    """Takes what the post hook saves: the quant state items become the parametrization's state (checked, as
    Linear4bit's are), the codes the `original` torch then loads. Anything wrong goes to load_state_dict's error
    list, and the module keeps its state."""
    key = prefix + param_name
    stats = {k[len(key) + 1:]: v for k, v in state_dict.items() if k.startswith(key + ".")}
    if key not in state_dict or not stats:  # not a quantized parameter's items: torch's rules
        return
    for k in stats:
        del state_dict[f"{key}.{k}"]
    data = state_dict.pop(key)
    parametrization = _parametrization(module, param_name)
    original = module.parametrizations[param_name].original
    if not isinstance(data, torch.Tensor) or any(not isinstance(v, torch.Tensor) for v in stats.values()):
        error_msgs.append(f"while loading {key}: expected tensors for it and its quant state items")
        return
    state, problems = QuantState.checked_from_dict(stats, device=original.device)
    problems = _state_problems(state, problems, data)
    if not problems and state.shape != parametrization.quant_state.shape:
        problems = [("", f"size mismatch: the checkpoint holds a 4-bit tensor of shape {list(state.shape)}, the "
                         f"current model's is {list(parametrization.quant_state.shape)}")]
    if not problems and (data.shape != original.shape or data.dtype != original.dtype):
        problems = [("", f"the checkpoint's packed codes are {data.dtype} of shape {list(data.shape)}, the current "
                         f"model's {original.dtype} of shape {list(original.shape)}")]
    if problems:
        error_msgs.extend(f"while loading {key}{'.' + k if k else ''}: {what}" for k, what in problems)
        return
    parametrization.quant_state = state
    state_dict[f"{prefix}parametrizations.{param_name}.original"] = data
