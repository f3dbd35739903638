"""Which kernel serves each bnb op on each dispatch key, as the dispatcher itself reports it (python -m bnb dispatch).

Everything here is read from torch's dispatcher: the ops are the "bnb::" names it holds, what serves a key is its
computed dispatch table (torch._C._dispatch_dump_table) or, for an alias key such as CompositeExplicitAutograd, the
registration on it (torch._C._dispatch_dump). A registration is told apart by where it was made, which the
dispatcher records: bnb's C++ files (bnb/ops/), bnb's reference kernels (bnb/reference/), other Python files
(torch.library registrations), other C++ (an out-of-tree library), and the kind of entry (fallthrough, a backend
fallback, an autograd kernel)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Optional

import torch

# What serves a key: kind -> (short label for the overview, description).
KINDS = {
    "bnb": ("bnb", "bnb's C++ kernel"),
    "reference": ("reference", "bnb's reference kernel (pure torch)"),
    "fake": ("fake", "bnb's Python fake (shapes only; sizes the data decides)"),
    "library": ("library", "an out-of-tree C++ library"),
    "python": ("python", "a Python kernel (torch.library)"),
    "formula": ("formula", "an autograd formula (register_autograd)"),
    "fallthrough": ("fallthrough", "falls through to the next key"),
    "fallback": ("fallback", "a backend fallback (every op of the key)"),
    "torch": ("torch", "one of torch's own kernels"),
    "nothing": ("-", "nothing: a call that reaches it fails"),
}


@dataclass(frozen=True)
class Served:
    kind: str  # a key of KINDS
    where: str  # "file:line" the dispatcher recorded; "" for nothing

    @property
    def label(self) -> str:
        return KINDS[self.kind][0]


_ENTRY = re.compile(r"(?P<fallthrough>fallthrough )?registered at (?P<where>.+?)(?: \[(?P<tag>[^\]]+)\])?$")


def classify(entry: Optional[str]) -> Served:
    """What one dispatch-table entry ("registered at FILE:LINE [tag]", or None for none) says serves the key."""
    if entry is None:
        return Served("nothing", "")
    m = _ENTRY.match(entry.split(" :: ")[0].strip())  # _dispatch_dump's lines go on with " :: <signature>"
    if m is None:
        return Served("torch", entry)
    where, tag = m["where"], m["tag"] or ""
    path = where.rsplit(":", 1)[0]
    if m["fallthrough"]:
        return Served("fallthrough", where)
    if tag == "backend fallback":
        return Served("fallback", where)
    if path.endswith(".py"):
        if re.search(r"(^|/)bnb/reference/[^/]+\.py$", path):
            return Served("reference", where)
        if tag == "autograd kernel" and re.search(r"(^|/)torch/library\.py$", path):
            return Served("formula", where)
        return Served("python", where)
    if re.search(r"(^|/)bnb/ops/", path):
        return Served("bnb", where)
    if re.search(r"(^|/)(aten/src|torch/csrc|c10)/", path):
        return Served("torch", where)
    return Served("library", where)


def op_names() -> list[str]:
    """Every bnb op the dispatcher holds ("gemv_4bit", "gemv_4bit.out", ...), sorted."""
    return sorted(n.removeprefix("bnb::") for n in torch._C._dispatch_get_all_op_names() if n.startswith("bnb::"))


def computed_table(qualname: str) -> dict[str, str]:
    """The dispatcher's computed table of an op ("bnb::gemv_4bit"): runtime key -> entry."""
    rows = (line.partition(": ") for line in torch._C._dispatch_dump_table(qualname).splitlines())
    return {key: entry for key, sep, entry in rows if sep}


def registrations(qualname: str) -> dict[str, str]:
    """The kernels registered on an op, by key as registered (alias keys too: "CompositeExplicitAutograd")."""
    out = {}
    for line in torch._C._dispatch_dump(qualname).splitlines():
        key, sep, entry = line.partition(": ")
        if sep and entry.startswith(("registered at", "fallthrough registered at")):
            out[key.removesuffix("[alias]")] = entry
    return out


def device_name() -> str:
    """PrivateUse1's name: "privateuseone", or the name a backend renamed it to (rename_privateuse1_backend)."""
    return torch._C._get_privateuse1_backend_name()


def key_label(key: str) -> str:
    """A dispatch key as the tables show it: PrivateUse1 with the device's name when it has been renamed."""
    name = device_name()
    if name != "privateuseone" and key.endswith("PrivateUse1"):
        return f"{key} ({name})"
    return key


# The keys the tables show: the in-tree backends, PrivateUse1 (a vendor's device), the reference's alias key, and
# the autograd key of each backend.
KEYS = ["CPU", "CUDA", "Meta", "PrivateUse1", "CompositeExplicitAutograd", "AutogradCPU", "AutogradCUDA",
        "AutogradPrivateUse1"]
_ALIAS_KEYS = {"CompositeExplicitAutograd"}


def served(qualname: str, key: str) -> Served:
    """What serves `key` for the op: its computed entry, or for an alias key its registration there. Meta served
    from the reference file is the op's Python fake (its outputs are sized by the data)."""
    if key in _ALIAS_KEYS:
        return classify(registrations(qualname).get(key))
    s = classify(computed_table(qualname).get(key))
    return Served("fake", s.where) if key == "Meta" and s.kind == "reference" else s


def short_path(where: str) -> str:
    """A registration's file, shorter: relative to the sys.path entry it lies under (site-packages, a runfiles
    root), or from aten/ or torch/ for torch's own build paths; else as it is."""
    roots = sorted((p.rstrip("/") + "/" for p in sys.path if p), key=len, reverse=True)
    for root in roots:
        if where.startswith(root):
            return where[len(root):]
    m = re.search(r"/((aten/src|torch/csrc)/.*)$", where)
    return m[1] if m else where


def op_table(name: str) -> str:
    """One op's table: each key, what serves it and where that was registered."""
    qualname = f"bnb::{name}"
    lines = [qualname]
    rows = [(key_label(k), served(qualname, k)) for k in KEYS]
    width = max(len(label) for label, _ in rows)
    what = max(len(KINDS[s.kind][1]) for _, s in rows)
    for label, s in rows:
        lines.append(f"  {label:<{width}}  {KINDS[s.kind][1]:<{what}}  {short_path(s.where)}".rstrip())
    return "\n".join(lines)


def overview(names: list[str]) -> str:
    """Every op on one line, a column per key, and the legend of the labels."""
    name = device_name()
    headers = {k: k for k in KEYS}
    headers["CompositeExplicitAutograd"] = "CEA"
    if name != "privateuseone":
        headers["PrivateUse1"] = name
    rows = [[n] + [served(f"bnb::{n}", k).label for k in KEYS] for n in names]
    cols = [["op"] + [headers[k] for k in KEYS]] + rows
    widths = [max(len(r[i]) for r in cols) for i in range(len(cols[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols]
    used = sorted({served(f"bnb::{n}", k).kind for n in names for k in KEYS}, key=list(KINDS).index)
    out.append("")
    out.append("CEA: CompositeExplicitAutograd, the kernel of every backend that has none of its own."
               + (f" {name}: the PrivateUse1 device." if name != "privateuseone" else ""))
    out += [f"  {KINDS[k][0]:<11} {KINDS[k][1]}" for k in used]
    return "\n".join(out)


def resolve(op: str) -> list[str]:
    """The ops `op` names ("gemv_4bit": every overload; "gemv_4bit.out": that one); raises naming what exists."""
    names = op_names()
    op = op.removeprefix("bnb::")
    found = [n for n in names if n == op or n.partition(".")[0] == op]
    if not found:
        raise ValueError(f"no bnb op {op!r}; the dispatcher has: {', '.join(names)}")
    return found
