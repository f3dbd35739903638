"""Optimizer state buffers, paged or not.

As bitsandbytes' paged optimizers do, a paged optimizer keeps the state of each large parameter (>= 1e5 elements)
on CUDA in unified memory (cuMemAllocManaged, through bnb._C), which the driver moves between host and device memory
page by page: state larger than the GPU has free can be allocated, and under memory pressure its pages go to host
memory instead of the step failing. Before each update the parameter's paged state is prefetched to the GPU on the
current stream (Prefetcher), as far as the device has memory free: a prefetch beyond what is free would only make
the driver evict other managed pages, perhaps this step's own, to bring these in; what is not prefetched still
moves when the update first touches it. Managed memory is freed when the last tensor on it goes, once the device is
idle (kernels may still read it).

The managed memory itself is bnb.paged_memory's, shared with bnb.functional's paged tensors.

Where the device or driver has no managed memory (or concurrent managed access), paged state falls back to
ordinary device memory, with one warning; such a buffer cannot spill to the host, so before a large one is made it
is checked against the memory the device has free (free in the driver plus what torch's caching allocator holds
unused): asking for more would fail inside step(), after torch's allocator had emptied its cache to retry, with some
parameters' state made and others not. The check fails first, with the sizes and the way out.

On the CPU and every other device paged state is ordinary memory (there is no device memory to page out of); this
is not an error, and nothing is said.
"""

from __future__ import annotations

import math

import torch

from . import checks
from ..paged_memory import _live, managed_or_none, managed_zeros, register  # noqa: F401  (_live: Prefetcher's)

PAGED_MIN_NUMEL = 100_000  # as bitsandbytes: smaller states are never paged


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def _available_cuda_bytes(device: torch.device) -> int:
    free, _ = torch.cuda.mem_get_info(device)
    cached_unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return free + cached_unused


def check_fits(owner: str, nbytes: int, device: torch.device) -> None:
    """Refuses (torch.OutOfMemoryError) a paged state buffer of `nbytes` that the CUDA device has no room for."""
    available = _available_cuda_bytes(device)
    if nbytes > available:
        checks.fail(owner, f"a paged optimizer state buffer needs {_mib(nbytes)} but {device} has {_mib(available)} "
                           f"free. Without managed memory on this GPU bnb keeps paged state in ordinary device "
                           f"memory, which cannot spill to host memory: use 8-bit state (optim_bits=8 or a ...8bit "
                           f"optimizer), or free device memory",
                    torch.OutOfMemoryError)


def state_buffer(owner: str, shape, dtype: torch.dtype, device: torch.device, is_paged: bool) -> torch.Tensor:
    """A zeroed state buffer; a large paged one on CUDA in managed memory, else (no managed memory) checked
    against free device memory first (module doc)."""
    device = torch.device(device)
    if is_paged and device.type == "cuda":
        numel = math.prod(shape)
        if numel >= PAGED_MIN_NUMEL:
            index = device.index if device.index is not None else torch.cuda.current_device()
            buffer = managed_or_none(managed_zeros, shape, dtype, index, f"bnb.optim.{owner}", "paged state is")
            if buffer is not None:
                # Marked and registered as bitsandbytes' paged state is: GlobalPageManager.prefetch_all moves it.
                buffer.is_paged, buffer.page_deviceid = True, index
                register(buffer)
                return buffer
            check_fits(owner, numel * dtype.itemsize, device)
    return torch.zeros(shape, dtype=dtype, device=device)


class Prefetcher:
    """Prefetches managed state to its GPU on the current stream, within the memory each device had free when the
    step began (module doc): one query per device and step, each buffer prefetched whole or not at all."""

    def __init__(self, free_bytes=None, prefetch=None):
        self._free: dict[int, int] = {}
        self._free_bytes = free_bytes or (lambda index: torch.cuda.mem_get_info(index)[0])
        self._prefetch = prefetch or _prefetch_on_current_stream

    def __call__(self, tensors) -> None:
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            address = t.data_ptr()
            index, nbytes = _live.get(address, (None, 0))
            if index is None or t.numel() * t.element_size() != nbytes:
                continue  # not (the whole of) a managed allocation
            if index not in self._free:
                self._free[index] = self._free_bytes(index)
            if nbytes <= self._free[index]:
                self._free[index] -= nbytes
                self._prefetch(index, address, nbytes)


def _prefetch_on_current_stream(index: int, address: int, nbytes: int) -> None:
    from bnb import _C
    _C.managed_prefetch(index, address, nbytes, torch.cuda.current_stream(index).cuda_stream, False)
