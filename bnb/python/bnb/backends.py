"""Out-of-tree backends that load themselves at `import bnb`, as torch's device extensions do at `import torch`.

An installed package declares an entry point in the group "bnb.backends" (bitsandbytes' is "bitsandbytes.backends",
torch's "torch.backends"); its object is a function of no arguments that registers the backend's kernels for bnb's
schemas (loads its C++ library with torch.ops.load_library, or calls torch.library.register_kernel). `import bnb`
calls each once, by name order, after bnb's own kernels, reference kernels and autograd formulas are registered.

A backend whose load fails gets a BackendWarning naming it, its entry point, its distribution and the error, and is
left out: `import bnb` still works, so CPU work and `python -m bnb dispatch` (which lists every backend and how its
load went) stay usable while a vendor package or its driver is broken. bitsandbytes raises instead; code that wants
that calls bnb.backends.raise_if_failed()."""

from __future__ import annotations

import importlib.metadata
import traceback
import warnings
from dataclasses import dataclass
from typing import Optional

GROUP = "bnb.backends"


class BackendWarning(UserWarning):
    """An installed backend failed to load (see the module's doc)."""


@dataclass(frozen=True)
class Backend:
    name: str  # the entry point's name
    value: str  # "module:function"
    dist: str  # "distribution version", or "?" where the entry point has none
    error: Optional[str] = None  # None: loaded

    def describe(self) -> str:
        return f"backend {self.name!r} ({self.value}, from {self.dist})"


_backends: list[Backend] = []
_loaded = False


def _dist(ep) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.metadata['Name']} {dist.version}" if dist is not None else "?"


def load_all() -> list[Backend]:
    """Loads every installed backend, once (import bnb calls this); returns what happened to each."""
    global _loaded
    if _loaded:
        return list(_backends)
    _loaded = True
    for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        try:
            ep.load()()
            _backends.append(Backend(ep.name, ep.value, _dist(ep)))
        except Exception as e:  # a broken backend must not take `import bnb` down with it (see the module's doc)
            where = traceback.extract_tb(e.__traceback__)[-1]
            error = f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno})"
            backend = Backend(ep.name, ep.value, _dist(ep), error)
            _backends.append(backend)
            warnings.warn(f"bnb: {backend.describe()} failed to load and is not used: {error}", BackendWarning,
                          stacklevel=2)
    return list(_backends)


def backends() -> list[Backend]:
    """The installed backends found at import, loaded or not."""
    return list(_backends)


def raise_if_failed() -> None:
    """Raises RuntimeError naming every installed backend that failed to load, for code that needs them all."""
    failed = [b for b in _backends if b.error]
    if failed:
        raise RuntimeError("bnb: " + "; ".join(f"{b.describe()} failed to load: {b.error}" for b in failed))
