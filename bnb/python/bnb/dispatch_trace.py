"""python -m bnb dispatch --trace: run an op once and show which kernels ran, the ops they called, and on which keys.

A TorchDispatchMode sees every op that reaches the Python dispatch key. For each, the trace takes the dispatch key
the dispatcher would pick below that key (from the arguments' key sets, skipping keys whose entry falls through),
records that key's entry in the op's dispatch table, and calls exactly that kernel (OpOverload.redispatch) with the
mode still active, so the ops the kernel calls are traced too, nested under it. What the dispatcher runs above the
Python key for the traced call itself (the autograd layer) is read from the table the same way."""

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


def _takes_numbers_as_tensors(func, args, kwargs) -> bool:
    """Whether a Tensor argument arrived as a Python number: a wrapped number, which torch unwraps on its way to
    Python and OpOverload.redispatch does not take back."""
    schema = func._schema.arguments
    values = list(zip(schema, args)) + [(a, kwargs[a.name]) for a in schema if a.name in kwargs]
    return any(isinstance(a.type, torch._C.TensorType) and isinstance(v, numbers.Number) for a, v in values)


class KernelTrace(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.steps: list[Step] = []
        self._depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        table = computed_table(name)
        key, ks = _first_kernel(table, _keyset(args, kwargs) & _BELOW_PYTHON)
        if key is None or _takes_numbers_as_tensors(func, args, kwargs):
            self.steps.append(Step(self._depth, name, key.name if key else "", classify(table.get(key.name) if key
                                                                                          else None),
                                   "its own calls not traced"))
            return func(*args, **kwargs)  # the mode is off inside: a plain call
        step = Step(self._depth, name, key.name, classify(table.get(key.name)))
        if key == DispatchKey.BackendSelect and isinstance(kwargs.get("device"), torch.device):
            # A factory op: BackendSelect hands it straight to the device's key, below the Python key.
            backend = torch._C._dispatch_key_for_device(kwargs["device"].type)
            step.note = f"BackendSelect -> {backend}"
            step.key, step.served = backend, classify(table.get(backend))
        self.steps.append(step)
        self._depth += 1
        try:
            with self:  # back on the mode stack while the kernel runs, so its calls are traced
                return func.redispatch(ks, *args, **kwargs)
        finally:
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
