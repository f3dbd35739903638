"""An import hook that serves `import bitsandbytes.<module>` with bnb's module object itself (the table's
SUBMODULES). Without it, importing a submodule of an aliased package (bitsandbytes.nn.parametrize, with
sys.modules["bitsandbytes.nn"] = bnb.nn) would load bnb's file a second time under the other name: a second copy
of every class, which isinstance checks against the first would not recognize."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

from . import _companion

PREFIX = "bitsandbytes."


class _Alias(importlib.abc.Loader):
    """Loads a name as an existing module: the import machinery records it under the bitsandbytes name, and the
    module keeps its own __spec__ (module_from_spec overwrites it; exec_module puts it back)."""

    def __init__(self, target: str):
        self.target = target
        self.own_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.own_spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PREFIX) or fullname[len(PREFIX):].startswith("_"):
            return None  # not ours, or the companion's own files (_optim.py, ...): the usual finders load them
        served_by = _companion.submodule_target(fullname[len(PREFIX):])
        if served_by is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(served_by))


def install() -> None:
    """Puts the finder first on sys.meta_path, once per process."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
