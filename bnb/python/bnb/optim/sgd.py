"""SGD with momentum, 32-bit or 8-bit blockwise state: m = g (first step), then m = momentum * m + g; p -= lr * m.
Weight decay is added to the gradient, as torch.optim.SGD's."""

from . import checks
from .optimizer import Optimizer1State, refuse

__all__ = ["SGD", "SGD8bit", "SGD32bit", "momentum_checks"]


def momentum_checks(owner: str, momentum, dampening, nesterov) -> None:
    """What the momentum update has not: no momentum (bitsandbytes' NotImplementedError), dampening and Nesterov
    (bitsandbytes ignores both)."""
    if momentum == 0:
        checks.fail(owner, "momentum must be > 0: the update keeps a momentum buffer (plain SGD: torch.optim.SGD), "
                           "got 0", NotImplementedError)
    refuse(owner, dampening != 0, f"dampening must be 0 (the momentum update has none; bitsandbytes ignores it), "
                                  f"got {dampening!r}")
    refuse(owner, bool(nesterov), f"nesterov=True is not supported (bitsandbytes ignores it), got {nesterov!r}")


class SGD(Optimizer1State):
    """SGD with momentum; optim_bits=8 keeps 8-bit state for parameters of at least min_8bit_size elements."""

    _beta_names = ("momentum", "dampening")

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, optim_bits=32, args=None,
                 min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        momentum_checks(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("momentum", params, lr, (momentum, dampening), 0.0, weight_decay, optim_bits, args,
                         min_8bit_size, percentile_clipping=percentile_clipping, block_wise=block_wise)


class SGD8bit(Optimizer1State):
    """SGD with momentum and 8-bit state."""

    _beta_names = ("momentum", "dampening")

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        momentum_checks(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("momentum", params, lr, (momentum, dampening), 0.0, weight_decay, 8, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class SGD32bit(Optimizer1State):
    """SGD with momentum and 32-bit state."""

    _beta_names = ("momentum", "dampening")

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        momentum_checks(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("momentum", params, lr, (momentum, dampening), 0.0, weight_decay, 32, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
