"""Refuses to load beside another bitsandbytes, which one of the two would silently shadow.

pip sees the companion and bitsandbytes as one distribution (both are named bitsandbytes), so installing either
into an environment replaces the other there; tools/install_shim.sh refuses to replace a real bitsandbytes at all.
What pip cannot see is the other one in another place on sys.path: PYTHONPATH, a --target directory, the user site,
a source checkout. At import, the companion looks at every sys.path entry for a bitsandbytes package that is not
the companion (it has no _companion.py) and for a bitsandbytes distribution whose version is not 0.50.0+bnb...
"""

from __future__ import annotations

import os
import sys


class ShadowingError(ImportError):
    """The companion and another bitsandbytes are both importable."""


def _metadata_version(dist_dir: str) -> str:
    for name in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(dist_dir, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break  # the headers end at the first blank line
        except OSError:
            continue
    return "?"


def others(own_package_dir: str) -> list[str]:
    """What else provides bitsandbytes on sys.path, one description each."""
    own = os.path.realpath(own_package_dir)
    found, seen = [], set()
    for entry in sys.path:
        where = os.path.realpath(entry or os.getcwd())
        if where in seen:
            continue
        seen.add(where)
        try:
            names = os.listdir(where)
        except OSError:  # missing, not a directory, a zip file
            continue
        for name in names:
            path = os.path.join(where, name)
            low = name.lower()
            if low == "bitsandbytes" and os.path.isdir(path):
                if os.path.realpath(path) != own and not os.path.exists(os.path.join(path, "_companion.py")):
                    found.append(f"a bitsandbytes package at {path}")
            elif low == "bitsandbytes.py":
                found.append(f"a bitsandbytes module at {path}")
            elif low.startswith("bitsandbytes-") and low.endswith((".dist-info", ".egg-info")):
                version = _metadata_version(path)
                if "+bnb" not in version:
                    found.append(f"the distribution bitsandbytes {version} at {path}")
    return found


def refuse_beside_another(own_package_dir: str) -> None:
    found = others(own_package_dir)
    if found:
        raise ShadowingError(
            f"bitsandbytes at {own_package_dir} is bnb's companion (it forwards to bnb), and another bitsandbytes is "
            f"importable too: {'; '.join(found)}. Which one `import bitsandbytes` gets would depend on sys.path "
            "order, so the companion refuses to load. Keep one: to run on bnb, uninstall the other (pip uninstall "
            "bitsandbytes in its environment, or take its directory off PYTHONPATH); to run on bitsandbytes, "
            f"uninstall the companion (pip uninstall bitsandbytes where it is installed: {os.path.dirname(own_package_dir)})",
            name="bitsandbytes")
