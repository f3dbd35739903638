"""Adagrad, 32-bit or 8-bit blockwise state: v += g^2; p -= lr * g / (sqrt(v) + eps), as torch.optim.Adagrad without
learning-rate decay or an initial accumulator. Weight decay is added to the gradient."""

from . import checks
from .optimizer import Optimizer1State, fixed_bits

__all__ = ["Adagrad", "Adagrad8bit", "Adagrad32bit"]


def adagrad_checks(owner: str, lr, weight_decay, eps, lr_decay, initial_accumulator_value) -> None:
    checks.at_least_zero(owner, "lr", lr)
    checks.at_least_zero(owner, "weight_decay", weight_decay)
    checks.at_least_zero(owner, "eps", eps)
    if initial_accumulator_value != 0.0:
        checks.fail(owner, f"initial_accumulator_value must be 0 (the state starts at zero), got "
                           f"{initial_accumulator_value!r}")
    if lr_decay != 0.0:
        checks.fail(owner, f"lr_decay must be 0 (not supported), got {lr_decay!r}")


class Adagrad(Optimizer1State):
    """Adagrad; optim_bits=8 keeps 8-bit state for parameters of at least min_8bit_size elements."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 optim_bits=32, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        adagrad_checks(type(self).__name__, lr, weight_decay, eps, lr_decay, initial_accumulator_value)
        super().__init__("adagrad", params, lr, (0.0, 0.0), eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class Adagrad8bit(Optimizer1State):
    """Adagrad with 8-bit state (optim_bits stays at its default 8: it is bitsandbytes' signature)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 optim_bits=8, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        adagrad_checks(type(self).__name__, lr, weight_decay, eps, lr_decay, initial_accumulator_value)
        fixed_bits(type(self).__name__, optim_bits, 8, 8)
        super().__init__("adagrad", params, lr, (0.0, 0.0), eps, weight_decay, 8, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class Adagrad32bit(Optimizer1State):
    """Adagrad with 32-bit state."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 optim_bits=32, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        adagrad_checks(type(self).__name__, lr, weight_decay, eps, lr_decay, initial_accumulator_value)
        fixed_bits(type(self).__name__, optim_bits, 32, 32)
        super().__init__("adagrad", params, lr, (0.0, 0.0), eps, weight_decay, 32, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
