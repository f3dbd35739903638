"""torch.bnbdev: the device module torch and torch.compile look up by the backend's name (torch.get_device_module),
over the DeviceGuard implementation of _device.so (torch.accelerator calls these)."""

import torch


def is_available() -> bool:
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
