"""bnb's tuning knobs.

Layers, later wins: built-in defaults < $XDG_CONFIG_HOME/bnb/config.toml (or ~/.config/bnb/config.toml)
< ./bnb.toml < the file named by BNB_CONFIG < BNB_<SECTION>_<KEY> environment variables < set() here.
Every knob is declared once, in C++ (bnb/core/knobs.cc); `python -m bnb config` lists them.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from . import _C


def get(name: str) -> Any:
    """The effective value of knob `name` (e.g. "cpu.threads"). KeyError for an unknown knob."""
    return _C.config_get(name)


def source(name: str) -> str:
    """Where the effective value of `name` came from: "default", "path:line", "env BNB_...", "bnb.config.set"."""
    return _C.config_source(name)


def set(name: str, value: Any) -> None:  # noqa: A001  (mirrors the config vocabulary)
    """Sets `name` for this process, above every other layer. ValueError names a wrong type or range."""
    _C.config_set(name, value)


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
    """Every knob: name, value, default, source, env, doc, shapes_code (part of compiled-kernel keys)."""
    return _C.config_effective()


@contextlib.contextmanager
def override(**knobs: Any) -> Iterator[None]:
    """Sets knobs for the duration of a with-block: override(cpu__threads=1) sets "cpu.threads"."""
    names = {k.replace("__", "."): v for k, v in knobs.items()}
    before = {n: (get(n), source(n) == "bnb.config.set") for n in names}
    try:
        for n, v in names.items():
            set(n, v)
        yield
    finally:
        for n, (value, was_set) in before.items():
            set(n, value) if was_set else unset(n)


def unknown_env_vars() -> list[str]:
    """BNB_* environment variables that name no knob (and are not BNB_CONFIG): a misspelt one is otherwise silently
    ignored. Other software may use the prefix too (bitsandbytes reads BNB_CUDA_VERSION), so these are notes, not
    errors."""
    import os
    # BNB_CONFIG names a file; BNB_PYTHON and BNB_BASE_PYTHON pick the interpreters of the build and of set-up.
    known = {e["env"] for e in effective()} | {"BNB_CONFIG", "BNB_PYTHON", "BNB_BASE_PYTHON"}
    return sorted(k for k in os.environ if k.startswith("BNB_") and k not in known)


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
