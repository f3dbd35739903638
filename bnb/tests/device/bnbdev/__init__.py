"""bnbdev: bnb's PrivateUse1 test device. `import bnbdev` loads the device library (_device.so: allocator, device
guard, the minimal aten ops, a CPU fallback with a deny list), names the PrivateUse1 backend "bnbdev" and gives it
the device module torch looks up by that name (torch.bnbdev). It registers no bnb kernel: bnbdev.kernels (a C++
library) and bnbdev.python_backend do, and with neither bnb's reference kernels serve it."""

import os

import torch

NAME = "bnbdev"
_HERE = os.path.dirname(os.path.abspath(__file__))


def load() -> None:
    """Loads the device once; also the "torch.backends" entry point of a test distribution (torch calls it at import
    torch, as it does a vendor's device extension)."""
    if torch._C._get_privateuse1_backend_name() == NAME:
        return  # loaded already (a second import path, or the entry point after a plain import)
    torch.ops.load_library(os.path.join(_HERE, "_device.so"))
    torch.utils.rename_privateuse1_backend(NAME)
    from . import device_module
    torch._register_device_module(NAME, device_module)
    # Tensor.bnbdev(), Tensor.is_bnbdev, Module.bnbdev(), as torch has for cuda.
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def memory_stats() -> dict:
    """The device allocator's counts: bytes and blocks held now, and allocations ever made."""
    live_bytes, live_blocks, allocations = torch.ops.bnbdev.memory_stats()
    return {"live_bytes": live_bytes, "live_blocks": live_blocks, "allocations": allocations}


load()
