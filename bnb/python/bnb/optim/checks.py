"""Argument checks of the optimizers: each error names the optimizer, the argument, the value and what was expected
("bnb.optim.Adam8bit: betas[0] must be in [0, 1), got 1.5"). The same checks serve the constructors, the
GlobalOptimManager's overrides (when a parameter's state is made) and the param_groups of a loaded state dict."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Optional, Sequence

OPTIM_BITS = (8, 32)


def fail(owner: str, message: str, error: type = ValueError) -> None:
    raise error(f"bnb.optim.{owner}: {message}")


def is_number(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def at_least_zero(owner: str, name: str, value: Any) -> None:
    # `not 0 <= value` also refuses NaN, as torch.optim's checks do.
    if not is_number(value) or not 0.0 <= value < math.inf:
        fail(owner, f"{name} must be a finite number >= 0, got {value!r}")


def parse_betas(owner: str, betas: Any, names: Sequence[str]) -> tuple:
    """betas as a tuple of len(names) floats in [0, 1); bitsandbytes also takes the string "(0.9, 0.999)"."""
    if isinstance(betas, str):
        try:
            betas = [float(b) for b in betas.replace("(", "").replace(")", "").strip().split(",")]
        except ValueError:
            fail(owner, f"betas must be {len(names)} numbers, got the string {betas!r}")
    try:
        betas = tuple(betas)
    except TypeError:
        fail(owner, f"betas must be a tuple of {len(names)} numbers ({', '.join(names)}), got {betas!r}")
    if len(betas) != len(names):
        fail(owner, f"betas must hold {len(names)} values ({', '.join(names)}), got {betas!r}")
    for name, beta in zip(names, betas):
        if not is_number(beta) or not 0.0 <= beta < 1.0:
            fail(owner, f"{name} must be in [0, 1), got {beta!r}")
    return betas


def optim_bits(owner: str, bits: Any) -> None:
    if bits not in OPTIM_BITS or isinstance(bits, bool):
        fail(owner, f"optim_bits must be 8 or 32, got {bits!r}")


def percentile(owner: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
        fail(owner, f"percentile_clipping must be an int in [0, 100] (100: off), got {value!r}")


def min_8bit_size(owner: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        fail(owner, f"min_8bit_size must be an int >= 0, got {value!r}")


def schedule(owner: str, name: str, value: Optional[Any]) -> None:
    if value is not None and (not is_number(value) or not 0 < value < math.inf):
        fail(owner, f"{name} must be None or a number of steps > 0, got {value!r}")


def config(owner: str, cfg: dict, beta_names: Sequence[str]) -> None:
    """A parameter's merged configuration (group values, optimizer arguments and overrides), before its state is
    made: an override is checked where it takes effect."""
    at_least_zero(owner, "lr", cfg["lr"])
    at_least_zero(owner, "eps", cfg["eps"])
    at_least_zero(owner, "weight_decay", cfg["weight_decay"])
    parse_betas(owner, cfg["betas"], beta_names)
    optim_bits(owner, cfg["optim_bits"])
    min_8bit_size(owner, cfg["min_8bit_size"])
    at_least_zero(owner, "max_unorm", cfg["max_unorm"])
    percentile(owner, cfg["percentile_clipping"])
    if not isinstance(cfg["skip_zeros"], bool):
        fail(owner, f"skip_zeros must be a bool, got {cfg['skip_zeros']!r}")
    at_least_zero(owner, "alpha", cfg.get("alpha", 0.0))
    schedule(owner, "t_alpha", cfg.get("t_alpha"))
    schedule(owner, "t_beta3", cfg.get("t_beta3"))
