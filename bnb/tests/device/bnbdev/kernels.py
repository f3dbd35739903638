"""bnbdev's out-of-tree C++ backend for bnb: _bnb_kernels.so registers TORCH_LIBRARY_IMPL(bnb, PrivateUse1) kernels
for every bnb op (bnb/ops/<family>/ops.h over a Backend of bnb/core's CPU kernels, as bnbdev's memory is host
memory); they win over bnb's reference kernels. `load` is the "bnb.backends" entry point of the test distribution."""

import os

import torch

import bnbdev

_PATH = os.path.join(bnbdev._HERE, "_bnb_kernels.so")


def load() -> None:
    """Loads the device and the kernel library, once."""
    import bnb  # noqa: F401  (the schemas first: the kernels are checked against them as they register)
    if _PATH not in torch.ops.loaded_libraries:
        torch.ops.load_library(_PATH)


def calls(op: str) -> int:
    """How often the library's kernel of bnb::<op> ("gemv_4bit", "dequantize_4bit.out", ...) has run."""
    return torch.ops.bnbdev_kernels.calls(op)
