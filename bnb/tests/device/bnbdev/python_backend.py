"""bnbdev's Python backend for bnb: a kernel for every bnb op, registered with torch.library.register_kernel for the
device "bnbdev"; they win over bnb's reference kernels. Each runs bnb's CPU kernel on host copies of its arguments
and copies the results (and what the op writes in place) back to the device: what a vendor's Python kernels would
do with their own runtime instead."""

import collections

import torch
from torch.utils import _pytree as pytree

import bnbdev

CALLS = collections.Counter()  # op name ("gemv_4bit", "dequantize_4bit.out") -> kernel runs
_registered = False


def _kernel(name: str, op: torch._ops.OpOverload):
    written = [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    names = [a.name for a in op._schema.arguments]

    def run(*args, **kwargs):
        CALLS[name] += 1
        device = next(t.device for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
        # torch.Tensor.cpu, not t.cpu(): an argument may be a Params4bit, whose own .cpu() moves its quant state.
        host_args, host_kwargs = pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, (args, kwargs))
        result = op(*host_args, **host_kwargs)
        for i in written:  # what the op wrote on the host goes back into the caller's device tensors
            if i < len(args):
                target, source = args[i], host_args[i]
            else:
                target, source = kwargs.get(names[i]), host_kwargs.get(names[i])
            if target is not None:  # an optional argument left out
                target.copy_(source)
        return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), result)

    return run


def register() -> None:
    """Registers a kernel for every op bnb defines (found in the dispatcher, not listed here), once."""
    global _registered
    if _registered:
        return
    import bnb  # noqa: F401  (the schemas)
    for qualname in torch._C._dispatch_get_all_op_names():
        if not qualname.startswith("bnb::"):
            continue
        name = qualname.removeprefix("bnb::")
        base, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.bnb, base), overload or "default")
        torch.library.register_kernel(qualname, bnbdev.NAME, _kernel(name, op))
    _registered = True
