"""Pure-torch reference kernels: the test oracle for every C++ kernel, and the kernel of every device that has no
C++ one (registered as CompositeExplicitAutograd, so any backend's own kernel wins over them). Each op's kernel and
facts are declared beside it (registry.kernel); a module of this package is an op family's file, found by name."""

import importlib
import pkgutil

import torch

from .registry import OPS, OpInfo

_lib = None


def _load_families() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def register() -> None:
    """Registers every reference kernel with the dispatcher, and marks the ops without gradients so (their Autograd
    key falls through, so outputs never require grad), once."""
    global _lib
    if _lib is not None:
        return
    _load_families()
    _lib = torch.library.Library("bnb", "IMPL")
    for info in OPS.values():
        _lib.impl(info.name, info.kernel, "CompositeExplicitAutograd")
        if not info.differentiable:
            _lib.impl(info.name, torch.library.fallthrough_kernel, "Autograd")
        if info.fake is not None:
            torch.library.register_fake(f"bnb::{info.name}", info.fake, lib=_lib)


__all__ = ["OPS", "OpInfo", "register"]
