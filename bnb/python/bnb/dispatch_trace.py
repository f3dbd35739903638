"""python -m bnb dispatch --trace: run an op once and show which kernels ran, the ops they called, and on which keys.

A TorchDispatchMode sees every op that reaches the Python dispatch key. For each, the trace takes the dispatch key
the dispatcher would pick below that key (from the arguments' key sets, skipping keys whose entry falls through),
records that key's entry in the op's dispatch table, and calls exactly that kernel (OpOverload.redispatch) with the
mode still active, so the ops the kernel calls are traced too, nested under it. What the dispatcher runs above the
Python key for the traced call itself (the autograd layer) is read from the table the same way.

One approximation: a C++ kernel may pass a number where an op takes a Tensor (a "wrapped number", as the .Scalar
overloads do); torch hands it to Python as a number, which OpOverload.redispatch does not take, so the trace passes it
on as a 0-dimensional tensor of the dtype type promotion would give the number (which can differ from the wrapped
number's only where every operand is 0-dimensional) and notes it."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._C import DispatchKey, DispatchKeySet
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .dispatch import Served, classify, computed_table

_BELOW_PYTHON = torch._C._dispatch_keyset_full_after(DispatchKey.Python)


@dataclass
class Step:
    depth: int  # 0 for the traced call; a kernel's calls one deeper
    op: str  # "bnb::gemv_4bit", "aten::empty.memory_format", ...
    key: str  # the dispatch key that served it
    served: Served
    note: str = ""


def _keyset(args, kwargs) -> DispatchKeySet:
    ks = DispatchKeySet(DispatchKey.BackendSelect)  # factory ops find their backend there
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor):
            ks = ks | torch._C._dispatch_keys(t)
    return ks


def _first_kernel(table: dict[str, str], ks: DispatchKeySet, stop: DispatchKeySet | None = None):
    """The highest key of ks whose entry does not fall through, with ks from that key down; (None, ks) if none."""
    while True:
        key = ks.highestPriorityTypeId()
        if key == DispatchKey.Undefined or (stop is not None and stop.has(key)):
            return None, ks
        entry = table.get(key.name)
        if entry is not None and not entry.startswith("fallthrough"):
            return key, ks
        ks = ks.remove(key)


def _number_dtype(v: numbers.Number, tensors: list[torch.Tensor]) -> torch.dtype:
    """The dtype a wrapped number v promotes as: its category's default, or float64/complex128 beside a float64 or
    complex128 tensor (so its value stays that precise)."""
    wide = any(t.dtype in (torch.float64, torch.complex128) for t in tensors)
    if isinstance(v, bool):
        return torch.bool
    if isinstance(v, numbers.Integral):
        return torch.int64
    if isinstance(v, numbers.Real):
        return torch.float64 if wide else torch.get_default_dtype()
    return torch.complex128 if wide else torch.complex64


def _numbers_as_tensors(func, args, kwargs):
    """args and kwargs with each number in a Tensor argument made a 0-dim CPU tensor (see the module doc); None when
    there is none."""
    args, kwargs = list(args), dict(kwargs)
    tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    found = False
    for i, a in enumerate(func._schema.arguments):
        positional = i < len(args)
        if not positional and a.name not in kwargs:
            continue
        v = args[i] if positional else kwargs[a.name]
        if isinstance(a.type, torch._C.TensorType) and isinstance(v, numbers.Number):
            t = torch.tensor(v, dtype=_number_dtype(v, tensors))
            if positional:
                args[i] = t
            else:
                kwargs[a.name] = t
            found = True
    return (tuple(args), kwargs) if found else None


class KernelTrace(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.steps: list[Step] = []
        self._depth = 0
        self._calls: list[tuple] = []  # (op, ids of its tensor arguments) of each call now running, innermost last

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        call = (func, tuple(id(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)))
        if self._calls and self._calls[-1] == call:
            # The running kernel re-entered its own call: torch's detach does while any mode is on (the Python
            # interpreter's detach). A plain call, with the mode off, is what happens without the trace.
            return func(*args, **kwargs)
        name = func.name()
        table = computed_table(name)
        converted = _numbers_as_tensors(func, args, kwargs)
        if converted is not None:
            args, kwargs = converted
        key, ks = _first_kernel(table, _keyset(args, kwargs) & _BELOW_PYTHON)
        if key is None:  # nothing below the Python key: let the dispatcher say so
            self.steps.append(Step(self._depth, name, "", classify(None)))
            return func(*args, **kwargs)
        step = Step(self._depth, name, key.name, classify(table.get(key.name)),
                    "a number passed as a 0-dim tensor" if converted is not None else "")
        if key == DispatchKey.BackendSelect:
            # BackendSelect hands the op straight to a backend's key (a factory's device=, else its tensors'),
            # below the Python key: that kernel is what runs.
            device = kwargs.get("device")
            if isinstance(device, torch.device):
                backend = torch._C._dispatch_key_for_device(device.type)
            else:
                below, _ = _first_kernel(table, ks.remove(key))
                backend = below.name if below is not None else ""
            step.note = f"BackendSelect -> {backend}"
            step.key, step.served = backend, classify(table.get(backend))
        self.steps.append(step)
        self._depth += 1
        self._calls.append(call)
        try:
            with self:  # back on the mode stack while the kernel runs, so its calls are traced
                return func.redispatch(ks, *args, **kwargs)
        finally:
            self._calls.pop()
            self._depth -= 1


def _layers_above(qualname: str, args, kwargs) -> list[Step]:
    """What the dispatcher runs for the call before it reaches a backend: the autograd layer, say."""
    table = computed_table(qualname)
    ks = _keyset(args, kwargs)
    steps = []
    above = torch._C._dispatch_keyset_full_after(DispatchKey.Python)
    while True:
        key, ks = _first_kernel(table, ks, stop=above)
        if key is None:
            return steps
        steps.append(Step(0, qualname, key.name, classify(table[key.name])))
        ks = ks.remove(key)


def trace(op: Callable, args: tuple, kwargs: dict[str, Any]) -> tuple[list[Step], Any]:
    """Runs op(*args, **kwargs) once; returns the steps that ran (the layers above the backend first) and the result."""
    layers = _layers_above(op.name(), args, kwargs)
    mode = KernelTrace()
    with mode:
        result = op(*args, **kwargs)
    return layers + mode.steps, result
