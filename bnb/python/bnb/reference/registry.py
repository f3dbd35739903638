"""Per-op facts, each beside the reference kernel it belongs to: `@kernel("op", differentiable=..., example=...)`.

The reference kernel serves every device without a kernel of its own (registered as CompositeExplicitAutograd, so a
backend's kernel wins over it). `differentiable=False` marks an op whose outputs never require grad (its Autograd
key falls through); True says bnb/autograd.py gives it a formula. `example(device)` returns (args, kwargs) of one
small valid call, which the contract test opchecks and `python -m bnb dispatch --trace` runs. `fake`, for the few
ops whose output sizes depend on the data (a C++ Meta kernel cannot make an unbacked size), is the op's Meta /
fake-tensor kernel; the op's family then registers no Meta kernel of its own."""

from dataclasses import dataclass
from typing import Callable, Optional

import torch


@dataclass(frozen=True)
class OpInfo:
    name: str  # "op" or "op.overload", without the namespace
    kernel: Callable
    differentiable: bool
    example: Callable[[torch.device], tuple[tuple, dict]]
    fake: Optional[Callable] = None


OPS: dict[str, OpInfo] = {}


def kernel(name: str, *, differentiable: bool, example: Callable[[torch.device], tuple[tuple, dict]],
           fake: Optional[Callable] = None):
    """Registers the decorated function as bnb::<name>'s reference kernel, with the op's facts."""
    def mark(fn: Callable) -> Callable:
        if name in OPS:
            raise RuntimeError(f"bnb::{name} has two reference kernels: {OPS[name].kernel.__qualname__} and "
                               f"{fn.__qualname__}")
        OPS[name] = OpInfo(name, fn, differentiable, example, fake)
        return fn
    return mark
