"""bitsandbytes.optim: bnb.optim's optimizers under bitsandbytes' module name, everything else bnb.optim's own.

transformers' Trainer keeps the nn.Embedding weights' optimizer state at 32 bits (a GlobalOptimManager override, as
bitsandbytes advises for embeddings) when "bitsandbytes" is in the name of the optimizer class it made. bnb.optim's
classes are named bnb.optim.<module>.<Class>, so each optimizer is subclassed here, unchanged, as
bitsandbytes.optim.<Class>: instances are bnb.optim's (isinstance holds), with bnb.optim's state dicts and
behaviour. GlobalOptimManager, its singleton and the base classes are bnb.optim's objects themselves.
"""

import torch

import bnb.optim as _bnb_optim

# A package to the import system, so that bitsandbytes.optim.<module> reaches bnb.optim.<module> (_aliases.py).
__path__ = []

_BASES = {"Optimizer8bit", "Optimizer1State", "Optimizer2State"}  # abstract: not made by name


def _rebadged(name: str, cls: type) -> type:
    return type(name, (cls,), {"__module__": "bitsandbytes.optim", "__qualname__": name, "__doc__": cls.__doc__})


for _name in _bnb_optim.__all__:
    _obj = getattr(_bnb_optim, _name)
    if isinstance(_obj, type) and issubclass(_obj, torch.optim.Optimizer) and _name not in _BASES:
        _obj = _rebadged(_name, _obj)
    globals()[_name] = _obj

__all__ = list(_bnb_optim.__all__)
