"""Optimizer state buffers, paged or not.

bitsandbytes' paged optimizers put the state of large parameters (>= 1e5 elements) in CUDA unified memory
(cudaMallocManaged through its C library) and prefetch it to the GPU before each update, so that the driver can
evict it to host memory when the GPU runs short. bnb has no unified-memory allocator yet (torch offers none from
Python; it would take a C++ allocator in bnb._C), so:
- on CUDA, paged state is ordinary device memory, and nothing is prefetched or evicted. A paged optimizer warns
  once that this is so. Before a large state buffer is made, it is checked against the memory the device has free
  (free in the driver plus what torch's caching allocator holds unused): a paged optimizer is chosen where memory
  is short, and an ordinary allocation cannot spill to the host as a paged one would, so asking for more than is
  free would fail inside step(), after torch's allocator had emptied its cache to retry, with some parameters'
  state made and others not. The check fails first, with the sizes and the way out.
- on the CPU and every other device, paged state is ordinary memory (there is no device memory to page out of);
  this is not an error, and nothing is said.
"""

from __future__ import annotations

import warnings

import torch

from . import checks

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
                           f"free. bnb keeps paged state in ordinary device memory (it has no unified-memory "
                           f"allocator yet), which cannot spill to host memory as bitsandbytes' does: use 8-bit "
                           f"state (optim_bits=8 or a ...8bit optimizer), or free device memory",
                    torch.OutOfMemoryError)


def state_buffer(owner: str, shape, dtype: torch.dtype, device: torch.device, is_paged: bool) -> torch.Tensor:
    """A zeroed state buffer; a large paged one on CUDA is checked against free memory first (module doc)."""
    device = torch.device(device)
    if is_paged and device.type == "cuda":
        numel = 1
        for d in shape:
            numel *= d
        if numel >= PAGED_MIN_NUMEL:
            check_fits(owner, numel * dtype.itemsize, device)
    return torch.zeros(shape, dtype=dtype, device=device)


def warn_cuda_paging(owner: str) -> None:
    warnings.warn(f"bnb.optim.{owner}: paged optimizer state is ordinary CUDA memory in bnb (no unified memory, "
                  f"no prefetch); it does not spill to host memory", stacklevel=4)
