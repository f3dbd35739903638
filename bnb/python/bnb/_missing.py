"""The names of bitsandbytes 0.50's API that bnb does not have, in one table, each with the feature it belongs to.

Code written for bitsandbytes that reaches one gets NotImplementedError naming the name and the feature, never an
AttributeError that reads like a typo: functions and classes are stubs that raise when called (so `hasattr` stays
True, as with bitsandbytes), plain values raise when read (through the module's __getattr__).
"""

from __future__ import annotations

# module -> {name: feature}. What bnb does instead follows the feature, after a colon, where it does something.
MISSING: dict[str, dict[str, str]] = {
    "bnb.functional": {
        "CUBLAS_Context": "cuBLAS handles: bnb's int8 matmul is an op, torch.ops.bnb.int8_linear_matmul",
        "igemm": "the int8 GEMMs bitsandbytes deprecated in 0.45: use int8_linear_matmul",
        "batched_igemm": "the int8 GEMMs bitsandbytes deprecated in 0.45: use int8_linear_matmul",
        "check_matmul": "the int8 GEMMs bitsandbytes deprecated in 0.45: use int8_linear_matmul",
        "lib": "the ctypes handle of libbitsandbytes: bnb's kernels are torch ops, torch.ops.bnb.*",
    },
}

# Names of MISSING that are values rather than functions or classes: reading them raises.
_VALUES = {("bnb.functional", "lib")}


def error(module: str, name: str) -> NotImplementedError:
    public = module.replace("bnb.", "bitsandbytes.", 1)
    return NotImplementedError(f"{module}.{name} (bitsandbytes' {public}.{name}) is not implemented in bnb: "
                               f"{MISSING[module][name]}")


def _stub(module: str, name: str):
    def raise_missing(*args, **kwargs):
        raise error(module, name)

    if name[:1].isupper():  # a class: instantiating it, or its get_instance(), raises
        stub = type(name, (), {"__init__": raise_missing, "get_instance": classmethod(raise_missing)})
    else:
        stub = raise_missing
        stub.__name__ = stub.__qualname__ = name
    stub.__module__ = module
    stub.__doc__ = f"Not in bnb ({MISSING[module][name]}): raises NotImplementedError."
    stub.__bnb_missing__ = MISSING[module][name]
    return stub


def install(namespace: dict, module: str):
    """Puts the stubs of `module`'s missing functions and classes into its namespace; returns a module __getattr__
    that raises NotImplementedError for its missing values and AttributeError for any other unknown name."""
    for name in MISSING.get(module, {}):
        if (module, name) not in _VALUES:
            namespace[name] = _stub(module, name)

    def __getattr__(name: str):
        if (module, name) in _VALUES:
            raise error(module, name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def table() -> list[tuple[str, str, str]]:
    """(module, name, feature) for every missing name, sorted."""
    return sorted((m, n, f) for m, names in MISSING.items() for n, f in names.items())
