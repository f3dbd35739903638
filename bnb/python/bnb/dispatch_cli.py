"""python -m bnb dispatch [OP] [--trace]: what serves each bnb op on each dispatch key (bnb.dispatch), and with
--trace which kernels ran for one call of each op's example (bnb.dispatch_trace)."""

from __future__ import annotations

import textwrap

import torch

from . import backends, dispatch
from .dispatch_trace import trace


def _backends_line() -> str:
    found = backends.backends()
    if not found:
        return f"installed backends ({backends.GROUP}): none"
    parts = [f"{b.name} ({b.value}, {b.dist}): " + ("loaded" if b.error is None else f"FAILED, {b.error}")
             for b in found]
    return f"installed backends ({backends.GROUP}): " + "; ".join(parts)


def default_device() -> str:
    """Where --trace runs by default: a named PrivateUse1 device (a vendor's), else CUDA if present, else the CPU."""
    name = dispatch.device_name()
    if name != "privateuseone":
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def _describe_args(args, kwargs) -> str:
    def one(v):
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
        return repr(v).replace("torch.", "")
    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


def trace_report(name: str, device: str, depth: int) -> str:
    from .reference import OPS
    args, kwargs = OPS[name].example(torch.device(device))
    base, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.bnb, base), overload or "default")
    steps, _ = trace(op, args, kwargs)
    shown = [s for s in steps if s.depth <= depth]
    rows = [("  " * s.depth + s.op, dispatch.key_label(s.key), s.served.label, dispatch.short_path(s.served.where),
             s.note) for s in shown]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [textwrap.fill(f"bnb::{name} on {device}, its example ({_describe_args(args, kwargs)}):", width=118,
                           subsequent_indent="    ")]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths + [0])).rstrip() for r in rows]
    if len(steps) > len(shown):
        hidden = len(steps) - len(shown)
        lines.append(f"  ... and {hidden} call{'s' if hidden > 1 else ''} deeper (--depth {depth + 1} or more shows "
                     "them)")
    for key in dict.fromkeys(s.key for s in steps if s.served.kind == "fallback"):  # at any depth
        fell_back = [s.op for s in steps if s.served.kind == "fallback" and s.key == key]
        lines.append(textwrap.fill(f"through the {dispatch.key_label(key)} fallback, {len(fell_back)} calls: "
                                   f"{', '.join(dict.fromkeys(fell_back))}", width=118, initial_indent="  ",
                                   subsequent_indent="    "))
    return "\n".join(lines)


def run_dispatch(args) -> int:
    names = dispatch.resolve(args.op) if args.op else dispatch.op_names()
    print(f"torch {torch.__version__}; PrivateUse1 is {dispatch.device_name()!r}")
    print(_backends_line())
    print()
    if args.trace:
        device = args.device or default_device()
        print("\n\n".join(trace_report(n, device, args.depth) for n in names))
    elif args.op:
        print("\n\n".join(dispatch.op_table(n) for n in names))
    else:
        print(dispatch.overview(names))
    return 0
