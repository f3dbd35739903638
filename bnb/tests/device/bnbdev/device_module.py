"""torch.bnbdev: the device module torch and torch.compile look up by the backend's name (torch.get_device_module),
over the DeviceGuard implementation of _device.so (torch.accelerator calls these)."""

import torch


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    """Loading the library initialized it (fake tensors ask, to give device tensors an index)."""
    return True


def device_count() -> int:
    return torch.ops.bnbdev.device_count()


def current_device() -> int:
    return torch.ops.bnbdev.current_device()


def set_device(device) -> None:
    torch.ops.bnbdev.set_device(torch._utils._get_device_index(device, optional=True))


def synchronize(device=None) -> None:
    """Every bnbdev op is synchronous: nothing to wait for."""


def _is_in_bad_fork() -> bool:
    return False


def manual_seed_all(seed: int) -> None:
    """bnbdev makes no random numbers (its CPU fallback refuses random ops): torch.manual_seed has nothing to seed."""


class device:
    """with torch.bnbdev.device(i): ...: device i is the current one inside (torch's storage .to() uses it)."""

    def __init__(self, device):
        self.index = torch._utils._get_device_index(device, optional=True)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc):
        set_device(self.previous)
        return False
