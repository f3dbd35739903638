"""The optimizers' state dicts, in bitsandbytes 0.50's format, and the checks of a loaded one.

A parameter's state holds (bitsandbytes' keys and dtypes):
  step        int, the number of updates made
  state1      float32 (32-bit) or uint8 codes (8-bit), the parameter's shape; AdEMAMix: [2, *shape] (m1 and m2)
  state2      the same for the two-state optimizers (Adam, AdamW, LAMB, AdEMAMix); absent for the others
  qmap1/2     float32 [256], the codebook of the 8-bit codes (signed dynamic map for state1, unsigned for state2)
  absmax1/2   float32 [blocks of 256] (AdEMAMix's absmax1: [2, blocks]), each block's scale
  unorm_vec   float32 [1], the update norm (max_unorm > 0, the 32-bit LAMB / LARS trust ratio)
  gnorm_vec   float32 [100], the squared gradient norms of the last 100 steps (percentile_clipping < 100)
state_dict() moves every key but step under "__bnb_optimizer_quant_state__" in each parameter's dict, as
bitsandbytes 0.50 does (FSDP then leaves them alone); load_state_dict() takes that and the flat form of earlier
bitsandbytes versions.
"""

from __future__ import annotations

from typing import Any

import torch

from . import checks

WRAP_KEY = "__bnb_optimizer_quant_state__"
BLOCKSIZE = 256
TENSOR_KEYS = ("state1", "state2", "qmap1", "qmap2", "absmax1", "absmax2", "unorm_vec", "gnorm_vec")
# bitsandbytes' block_wise=False 8-bit state (one absmax per tensor), which bnb does not implement.
NON_BLOCKWISE_KEYS = ("max1", "max2", "new_max1", "new_max2")
# What bitsandbytes 0.50 wraps (its non_castable_tensor_keys).
WRAPPED_KEYS = TENSOR_KEYS + NON_BLOCKWISE_KEYS


def wrap(packed_state: dict) -> dict:
    """Each parameter's tensor keys under WRAP_KEY, in new dicts (the optimizer's own stay as they are)."""
    out = {}
    for index, param_state in packed_state.items():
        if not isinstance(param_state, dict):
            out[index] = param_state
            continue
        flat = {k: v for k, v in param_state.items() if k not in WRAPPED_KEYS}
        wrapped = {k: v for k, v in param_state.items() if k in WRAPPED_KEYS}
        if wrapped:
            flat[WRAP_KEY] = wrapped
        out[index] = flat
    return out


def unwrap(param_state: Any) -> Any:
    """A parameter's state with its WRAP_KEY dict merged in (a new dict)."""
    if not isinstance(param_state, dict) or WRAP_KEY not in param_state:
        return param_state
    flat = {k: v for k, v in param_state.items() if k != WRAP_KEY}
    inner = param_state[WRAP_KEY]
    if not isinstance(inner, dict):
        raise ValueError(f"{WRAP_KEY} must be a dict of state tensors, got {type(inner).__name__}")
    flat.update(inner)
    return flat


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {_dtype(value.dtype)} tensor of shape {list(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]


class _Checker:
    """Checks one parameter's loaded state (module doc), raising ValueError that names the parameter's index, the key,
    what it holds and what was expected."""

    def __init__(self, owner: str, index: Any, p: torch.Tensor, state: dict):
        self.owner, self.index, self.p, self.state = owner, index, p, state

    def fail(self, key: str, message: str) -> None:
        checks.fail(self.owner, f"load_state_dict: state of parameter {self.index} (shape {list(self.p.shape)}), "
                                f"key '{key}': {message}")

    def tensor(self, key: str, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        value = self.state.get(key)
        if value is None:
            self.fail(key, f"missing; expected a {_dtype(dtype)} tensor of shape {list(shape)}")
        if not isinstance(value, torch.Tensor) or value.dtype != dtype or tuple(value.shape) != tuple(shape):
            self.fail(key, f"expected a {_dtype(dtype)} tensor of shape {list(shape)}, got {_describe(value)}")
        if value.is_sparse or value.device.type == "meta":
            self.fail(key, f"expected a dense tensor with data, got one on {value.device} ({value.layout})")
        return value

    def absent(self, key: str, why: str) -> None:
        if key in self.state:
            self.fail(key, f"unexpected ({why}); got {_describe(self.state[key])}")


def _step(c: _Checker) -> int:
    step = c.state.get("step")
    if isinstance(step, torch.Tensor) and step.numel() == 1 and step.dtype != torch.bool:
        value = step.item()  # torch.optim keeps step as a float32 tensor
        step = int(value) if isinstance(value, float) and value.is_integer() else value
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        c.fail("step", f"expected an int >= 0 (the number of updates made), got {_describe(step)}")
    return step


def _codebook(c: _Checker, key: str) -> None:
    qmap = c.tensor(key, torch.float32, (256,))
    q = qmap.detach().cpu()
    if not bool(torch.isfinite(q).all()) or not bool((q[1:] >= q[:-1]).all()):
        c.fail(key, "expected 256 finite ascending values (the 8-bit codes' codebook)")


def _absmax(c: _Checker, key: str, shape: tuple) -> None:
    absmax = c.tensor(key, torch.float32, shape).detach().cpu()
    if not bool(torch.isfinite(absmax).all()) or bool((absmax < 0).any()):
        c.fail(key, "expected finite block scales >= 0")


def check_param_state(owner: str, index: Any, p: torch.Tensor, state: Any, two_states: bool, halves: int) -> dict:
    """The loaded state of parameter `p` (flat: unwrapped), checked; a new dict, with step as an int. `halves` is 2
    for AdEMAMix (state1 holds m1 and m2), else 1. An empty dict is a parameter not updated yet."""
    if not isinstance(state, dict):
        checks.fail(owner, f"load_state_dict: state of parameter {index} must be a dict, got {type(state).__name__}")
    state = unwrap(state)
    if not state:
        return {}
    c = _Checker(owner, index, p, state)
    old = [k for k in NON_BLOCKWISE_KEYS if k in state]
    if old:
        c.fail(old[0], "non-blockwise 8-bit state (bitsandbytes' block_wise=False): bnb keeps 8-bit state in blocks "
                       "of 256 only")
    unknown = [k for k in state if k != "step" and k not in TENSOR_KEYS]
    if unknown:
        hint = " (torch.optim's state? bnb.optim takes bitsandbytes' state1/state2 format)" if any(
            k in ("exp_avg", "exp_avg_sq", "momentum_buffer", "square_avg", "sum") for k in unknown) else ""
        c.fail(str(unknown[0]), f"not a key of bnb's optimizer state{hint}; expected step and "
                                f"{', '.join(TENSOR_KEYS)}")
    out = {"step": _step(c)}
    shape = tuple(p.shape)
    s1_shape = (halves, *shape) if halves == 2 else shape
    s1 = state.get("state1")
    if not isinstance(s1, torch.Tensor) or s1.dtype not in (torch.float32, torch.uint8):
        c.fail("state1", f"expected a float32 (32-bit) or uint8 (8-bit) tensor of shape {list(s1_shape)}, got "
                         f"{_describe(s1)}")
    dtype = s1.dtype
    c.tensor("state1", dtype, s1_shape)
    if two_states:
        c.tensor("state2", dtype, shape)
    else:
        c.absent("state2", "this optimizer keeps one state")
    if dtype == torch.uint8:
        blocks = -(-p.numel() // BLOCKSIZE)
        _codebook(c, "qmap1")
        _absmax(c, "absmax1", (halves, blocks) if halves == 2 else (blocks,))
        if two_states:
            _codebook(c, "qmap2")
            _absmax(c, "absmax2", (blocks,))
        else:
            for key in ("qmap2", "absmax2"):
                c.absent(key, "this optimizer keeps one state")
    else:
        for key in ("qmap1", "qmap2", "absmax1", "absmax2"):
            c.absent(key, "state1 is float32 (32-bit state); qmap and absmax belong to 8-bit state")
    if "unorm_vec" in state:
        c.tensor("unorm_vec", torch.float32, (1,))
    if "gnorm_vec" in state:
        c.tensor("gnorm_vec", torch.float32, (100,))
    out.update({k: state[k] for k in TENSOR_KEYS if k in state})
    return out
