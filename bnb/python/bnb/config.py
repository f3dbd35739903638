"""bnb's tuning knobs.

Layers, later wins: built-in defaults < $XDG_CONFIG_HOME/bnb/config.toml (or ~/.config/bnb/config.toml)
< ./bnb.toml < the file named by BNB_CONFIG < BNB_<SECTION>_<KEY> environment variables < set() here.
Every knob is declared once, in C++ (bnb/core/knobs.cc); `python -m bnb config` lists them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

from . import _C


def get(name: str) -> Any:
    """The effective value of knob `name` (e.g. "cpu.threads"). KeyError for an unknown knob."""
    return _C.config_get(name)


def source(name: str) -> str:
    """Where the effective value of `name` came from: "default", "path:line", "env BNB_...", "bnb.config.set"."""
    return _C.config_source(name)


def set(name: str, value: Any) -> None:  # noqa: A001  (mirrors the config vocabulary)
    """Sets `name` for this process, above every other layer. Takes int, bool and str, and what stands for one:
    numpy scalars and 0-d tensors (their item()), paths (os.PathLike). ValueError names a value of the wrong type
    for the knob or out of its range; TypeError one that is none of those kinds (a float, None)."""
    _C.config_set(name, _plain(value))


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return value.item()
    return value


def unset(name: str) -> None:
    """Drops the value set() gave `name`; the next layer down shows through again."""
    _C.config_unset(name)


def reset() -> None:
    """Drops every value set() gave."""
    _C.config_reset()


def reload() -> None:
    """Reads the config files and environment again (set() values stay). ValueError names file:line:col."""
    _C.config_reload()


def effective() -> list[dict[str, Any]]:
    """Every knob: name, value, default, source, env, doc."""
    return _C.config_effective()


# The knobs of override() blocks still open, process-wide: each knob's values newest last, with the block that set
# each, and what it was before the first of them (value, whether set() gave it).
_override_lock = threading.Lock()
_overrides: dict[str, list[tuple[object, Any]]] = {}
_beneath: dict[str, tuple[Any, bool]] = {}


@contextlib.contextmanager
def override(**knobs: Any) -> Iterator[None]:
    """Sets knobs for the duration of a with-block: override(cpu__threads=1) sets "cpu.threads". The setting is
    process-wide, as set()'s (the kernels read one configuration). Blocks may overlap in any order, across threads
    too: a knob holds the value of its newest open block, and when the last one closes, what it had before the
    first (a set() of that knob inside a block is undone then)."""
    names = {k.replace("__", "."): v for k, v in knobs.items()}
    token = object()
    with _override_lock:
        pushed = []
        try:
            for n, v in names.items():
                beneath = None if n in _overrides else (get(n), source(n) == "bnb.config.set")
                set(n, v)  # checks the value: a bad one leaves this block's earlier knobs undone below
                if beneath is not None:
                    _beneath[n], _overrides[n] = beneath, []
                _overrides[n].append((token, v))
                pushed.append(n)
        except BaseException:
            _close(token, pushed)
            raise
    try:
        yield
    finally:
        with _override_lock:
            _close(token, pushed)


def _close(token: object, names: list[str]) -> None:
    """Drops block `token`'s values of `names`: each knob takes its newest remaining block's value, or the one it
    had before them all."""
    for n in names:
        stack = _overrides[n]
        stack[:] = [entry for entry in stack if entry[0] is not token]
        if stack:
            set(n, stack[-1][1])
            continue
        del _overrides[n]
        value, was_set = _beneath.pop(n)
        set(n, value) if was_set else unset(n)


# BNB_* variables that are no knob's and are meant: BNB_CONFIG names a file; BNB_PYTHON and BNB_BASE_PYTHON pick
# the interpreters of the build and of set-up; bitsandbytes reads BNB_CUDA_VERSION.
_OTHER_VARS = frozenset({"BNB_CONFIG", "BNB_PYTHON", "BNB_BASE_PYTHON", "BNB_CUDA_VERSION"})


def unknown_env_vars() -> list[str]:
    """BNB_* environment variables that name no knob: a misspelt one (BNB_CPU_THRED) would otherwise be silently
    ignored. Reads no configuration, so a broken config file does not hide them."""
    known = frozenset(_C.knob_env_names()) | _OTHER_VARS  # (set is this module's set())
    return sorted(k for k in os.environ if k.startswith("BNB_") and k not in known)


def _warn_unknown_env_vars() -> None:
    """One warning per misspelt variable, at import: a knob set by the environment is set before any code runs."""
    import warnings
    for name in unknown_env_vars():
        warnings.warn(f"bnb: {name} is set but is no bnb knob's variable, so it is ignored (a knob's is "
                      f"BNB_<SECTION>_<KEY>, as BNB_CPU_THREADS for cpu.threads; python -m bnb config lists them)",
                      stacklevel=3)


def toml_value(value: Any) -> str:
    """`value` as a config file would spell it (true, 4096, "best"), so a line of the table can be copied into one."""
    import json
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    return str(value)


def format_table() -> str:
    """The effective configuration as an aligned text table, as `python -m bnb config` prints it."""
    rows = [(e["name"], toml_value(e["value"]), e["source"], e["doc"]) for e in effective()]
    heads = ("knob", "value", "from", "meaning")
    widths = [max(len(r[i]) for r in rows + [heads]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  " + heads[3]]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])
    return "\n".join(lines)
