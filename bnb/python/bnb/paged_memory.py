"""Paged tensors: CUDA unified (managed) memory as torch tensors, and bitsandbytes' API over them (bnb.functional's
get_paged, prefetch_tensor, GlobalPageManager, fill, elementwise_func, _mul).

Managed memory (cuMemAllocManaged, through bnb._C) has one address for host and device; the driver moves its pages
to whichever touches them, so more than the GPU holds can be allocated, and under memory pressure pages go to host
memory instead of an allocation failing. bnb hands it to torch as a CUDA tensor (bitsandbytes hands out a CPU tensor
over the same memory and passes its address to its kernels): torch's CUDA ops and bnb's ops run on it directly.
Prefetching starts moving a tensor's pages to its GPU, or to host memory, ahead of use.

On the CPU and every other device a paged tensor is ordinary memory (there is no device memory to page out of);
where a GPU or its driver has no managed memory, get_paged warns once and gives ordinary device memory. Both carry
is_paged = True (they came from get_paged), and prefetching them does nothing.

Every managed allocation is recorded in `_live` by its start address while any tensor uses it, so a prefetch finds
the allocation a tensor lies in, and a copy of a paged tensor (deepcopy, torch.load: ordinary memory) is never
taken for managed memory.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Optional

import torch

FIRST_CUDA_DEVICE = torch.device("cuda", index=0)

# Live managed allocations: start address -> (device index, bytes), in the order they were made.
_live: dict[int, tuple[int, int]] = {}


class _ManagedBuffer:
    """One managed allocation of `nbytes` for CUDA device `index`, seen by torch through the CUDA array interface:
    torch.as_tensor keeps this object alive while any tensor uses the memory, and its finalizer frees it."""

    def __init__(self, index: int, nbytes: int):
        from bnb import _C
        self._free = _C.managed_free  # held: the finalizer may run while the interpreter shuts down
        self.index = index
        self.address = _C.managed_alloc(index, nbytes)
        _live[self.address] = (index, nbytes)
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.address, False),
                                         "version": 3, "strides": None, "stream": None}

    def __del__(self):
        _live.pop(self.address, None)
        try:
            self._free(self.index, self.address)
        except ValueError:  # the driver already shut down (interpreter exit): it has freed everything
            pass


def managed_empty(shape, dtype: torch.dtype, index: int) -> torch.Tensor:
    """An uninitialized tensor of `shape` and `dtype` in managed memory for CUDA device `index` (ValueError or
    RuntimeError where there is none)."""
    nbytes = math.prod(shape) * dtype.itemsize
    raw = torch.as_tensor(_ManagedBuffer(index, max(nbytes, 1)), device=torch.device("cuda", index))
    return raw[:nbytes].view(dtype).view(tuple(shape))


def managed_zeros(shape, dtype: torch.dtype, index: int) -> torch.Tensor:
    """managed_empty, zeroed on the device."""
    return managed_empty(shape, dtype, index).zero_()


def allocation_of(t: torch.Tensor) -> Optional[tuple[int, int, int]]:
    """(device index, address, bytes) of the managed memory t's elements occupy, or None when t does not lie
    within one live managed allocation (ordinary memory, or a copy)."""
    if t.device.type != "cuda" or t.numel() == 0:
        return None
    return _within_live(t.data_ptr(), _span_bytes(t))


def _within_live(lo: int, span: int) -> Optional[tuple[int, int, int]]:
    """(device index, lo, span) where [lo, lo + span) lies within one live managed allocation, else None."""
    for address, (index, nbytes) in _live.items():
        if address <= lo and lo + span <= address + nbytes:
            return index, lo, span
    return None


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes from t's first element to the end of its last (its strides may skip some between)."""
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()) if size > 0)
    return (last + 1) * t.element_size()


def _fail(function: str, message: str, error=ValueError):
    raise error(f"bnb.functional.{function}: {message}")


def _shape_of(function: str, shape) -> tuple[int, ...]:
    """get_paged's *shape: ints, or one tuple / torch.Size of them."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    for size in shape:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            _fail(function, f"shape {tuple(shape)!r} must be non-negative ints; got {size!r}",
                  TypeError if not isinstance(size, int) or isinstance(size, bool) else ValueError)
    return tuple(shape)


_managed_unavailable: set[int] = set()  # CUDA devices where a managed allocation failed (warned once each)


def managed_or_none(make, shape, dtype: torch.dtype, index: int, who: str, what: str) -> Optional[torch.Tensor]:
    """make(shape, dtype, index) (managed_empty or managed_zeros), or None where CUDA device `index` has no managed
    memory: the first failure there warns, naming `who` and saying `what` is ordinary device memory instead."""
    if index in _managed_unavailable:
        return None
    try:
        return make(shape, dtype, index)
    except (ValueError, RuntimeError, TypeError) as e:  # no managed memory, or torch took none
        _managed_unavailable.add(index)
        warnings.warn(f"{who}: no managed memory on cuda:{index} ({e}); {what} ordinary device memory there and does "
                      f"not spill to host memory", stacklevel=3)
        return None


def get_paged(*shape, dtype: torch.dtype = torch.float32, device=FIRST_CUDA_DEVICE) -> torch.Tensor:
    """A paged tensor of `shape` (ints, or one tuple), uninitialized as torch.empty's: on a CUDA device in managed
    memory (module doc), elsewhere ordinary memory. Marked is_paged = True, page_deviceid = the CUDA device's index
    (None off CUDA), as bitsandbytes marks its own."""
    shape = _shape_of("get_paged", shape)
    if not isinstance(dtype, torch.dtype):
        _fail("get_paged", f"dtype must be a torch.dtype; got {dtype!r}", TypeError)
    device = torch.device(device)
    out = None
    index = None
    if device.type == "cuda" and not torch.cuda.is_available():
        _fail("get_paged", f"device {device} is not available (torch.cuda.is_available() is False); pass "
                           f"device='cpu' for a paged tensor in ordinary memory", RuntimeError)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        out = managed_or_none(managed_empty, shape, dtype, index, "bnb.functional.get_paged", "paged tensors are")
        device = torch.device("cuda", index)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=device)
    out.is_paged = True
    out.page_deviceid = index
    return out


def _check_paged(function: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(function, f"{name} must be a tensor; got {type(t).__name__}", TypeError)
    if not getattr(t, "is_paged", False):
        _fail(function, f"{name} ({tuple(t.shape)}, {t.dtype}, {t.device}) is not a paged tensor: only tensors made "
                        f"by get_paged (or a paged optimizer's state) can be prefetched")


def prefetch_tensor(A: torch.Tensor, to_cpu: bool = False) -> None:
    """Starts moving a paged tensor's pages to its GPU (to host memory where to_cpu), ordered on that GPU's current
    stream. Nothing to do for paged tensors in ordinary memory (module doc)."""
    _check_paged("prefetch_tensor", "A", A)
    found = allocation_of(A)
    if found is None:
        return
    index, address, nbytes = found
    from bnb import _C
    _C.managed_prefetch(index, address, nbytes, torch.cuda.current_stream(index).cuda_stream, bool(to_cpu))


def register(t: torch.Tensor) -> None:
    """Records a paged optimizer's state buffer for GlobalPageManager.prefetch_all, without keeping it alive."""
    GlobalPageManager.get_instance()._registered.append(weakref.ref(t))


class GlobalPageManager:
    """bitsandbytes' registry of paged tensors: prefetch_all() prefetches those in `paged_tensors` (a list the user
    may append to) and the paged optimizers' state (held weakly: it goes with its optimizer), the first added last,
    as bitsandbytes orders it (what was added first is used first, so it should be the last evicted)."""

    _instance = None

    def __init__(self):
        raise RuntimeError("Call get_instance() instead")

    def initialize(self):
        self.paged_tensors = []
        self._registered: list[weakref.ref] = []

    @classmethod
    def get_instance(cls) -> "GlobalPageManager":
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def prefetch_all(self, to_cpu: bool = False) -> None:
        self._registered = [r for r in self._registered if r() is not None]
        for t in [r() for r in self._registered][::-1] + self.paged_tensors[::-1]:
            if t is not None:
                prefetch_tensor(t, to_cpu)


# elementwise_func's functions: name -> what it does to A (flat index i), as bitsandbytes' CUDA kernels do.
_FUNCTIONS = {"fill": "A[i] = value", "arange": "A[i] = i", "_mul": "A[i] = A[i] * B[i]"}


def elementwise_func(func_name: str, A: torch.Tensor, B: Optional[torch.Tensor], value, prefetch: bool = True) -> None:
    """bitsandbytes' elementwise kernels over (paged) tensors, in place, in A's element order: "fill" sets every
    element of A to value, "arange" to its index, "_mul" multiplies A by B element by element. Any dtype torch
    has (bitsandbytes: float32, and uint8 for fill); a value A's dtype cannot hold is an error, not wrapped. Paged
    operands are prefetched to A's GPU first (prefetch=True), and the call returns once A holds the result."""
    if func_name not in _FUNCTIONS:
        _fail("elementwise_func", f"func_name {func_name!r} is not one of {sorted(_FUNCTIONS)}", NotImplementedError)
    if not isinstance(A, torch.Tensor):
        _fail("elementwise_func", f"A must be a tensor; got {type(A).__name__}", TypeError)
    if func_name == "arange" and not A.dtype.is_floating_point and A.numel() > 1:
        top = torch.iinfo(A.dtype).max if A.dtype != torch.bool else 1
        if A.numel() - 1 > top:
            _fail("elementwise_func", f"arange: A's {A.numel()} indices do not fit its dtype {A.dtype} "
                                      f"(largest {top})")
    if func_name == "_mul":
        if not isinstance(B, torch.Tensor):
            _fail("elementwise_func", f"_mul needs a tensor B; got {type(B).__name__}", TypeError)
        if B.numel() != A.numel() or B.device != A.device:
            _fail("elementwise_func", f"_mul: B ({tuple(B.shape)}, {B.device}) must have as many elements as A "
                                      f"({tuple(A.shape)}, {A.device}) and be on its device")
    paged = [t for t in (A, B) if isinstance(t, torch.Tensor) and getattr(t, "is_paged", False)]
    if prefetch and A.device.type == "cuda":
        for t in paged:
            prefetch_tensor(t)
    with torch.no_grad():
        if func_name == "fill":
            try:
                A.fill_(value)
            except (RuntimeError, TypeError) as e:  # torch checks before it writes: A is unchanged
                _fail("fill", f"value {value!r} does not fit A's dtype {A.dtype} ({e})")
        elif func_name == "arange":
            A.copy_(torch.arange(A.numel(), device=A.device).view(A.shape))  # rounded to A's dtype
        else:
            A.mul_(B.reshape(A.shape))
    if paged and A.device.type == "cuda":
        torch.cuda.synchronize(A.device)  # as bitsandbytes: the host may read paged memory as soon as this returns


def fill(A: torch.Tensor, value, device=None, prefetch: bool = True) -> None:
    """Sets every element of A to value (elementwise_func "fill"); `device` is ignored, as in bitsandbytes."""
    elementwise_func("fill", A, None, value, prefetch)


def _mul(A: torch.Tensor, B: torch.Tensor, device=None) -> None:
    """A *= B element by element (elementwise_func "_mul")."""
    elementwise_func("_mul", A, B, 0)
