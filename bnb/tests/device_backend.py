"""The bnb backend a device test runs with, chosen by BNBDEV_BACKEND (one Bazel target each, as registrations last
for the process): "reference" (nothing registered for bnbdev: bnb's reference kernels serve it), "library" (the
out-of-tree C++ library, bnbdev/_bnb_kernels.so) or "python" (bnbdev.python_backend's register_kernel kernels)."""

import os
import re

import torch

import bnbdev

BACKEND = os.environ.get("BNBDEV_BACKEND", "reference")
DEV = torch.device(bnbdev.NAME)

if BACKEND == "library":
    import bnbdev.kernels
    bnbdev.kernels.load()
elif BACKEND == "python":
    import bnbdev.python_backend
    bnbdev.python_backend.register()
elif BACKEND != "reference":
    raise ValueError(f"BNBDEV_BACKEND must be reference, library or python, got {BACKEND!r}")

# Whether the backend's gemm_4bit dequantizes and multiplies in A's dtype (the reference's composition and the
# library's); the python backend runs bnb's own CPU kernels on host copies.
COMPOSES_PRODUCTS = BACKEND in ("reference", "library")

# Where the dispatcher records each backend's kernels as registered (bnb.dispatch.Served.where).
WHERE = {"reference": r"bnb/reference/__init__\.py:\d+", "library": r"bnb/tests/device/kernels/\w+\.cc:\d+",
         "python": r"torch/library\.py:\d+"}[BACKEND]


def kernel_calls(name: str) -> int:
    """Runs of the backend's own kernel of bnb::<name> so far (the reference counts none)."""
    if BACKEND == "library":
        return bnbdev.kernels.calls(name)
    if BACKEND == "python":
        return bnbdev.python_backend.CALLS[name]
    return 0


def served_as_expected(served) -> bool:
    return served.kind == BACKEND and re.search(WHERE + "$", served.where) is not None


def op(name: str):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.bnb, base), overload or "default")


def outputs(result, args, kwargs) -> list:
    """What a call produced: its results, then every tensor argument (out= ones hold results too)."""
    results = list(result) if isinstance(result, (tuple, list)) else ([] if result is None else [result])
    return results + [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]


__all__ = ["BACKEND", "DEV", "kernel_calls", "op", "outputs", "served_as_expected"]
