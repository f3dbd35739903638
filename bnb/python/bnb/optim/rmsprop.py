"""RMSprop, 32-bit or 8-bit blockwise state: v = alpha * v + (1 - alpha) * g^2; p -= lr * g / (sqrt(v) + eps), as
torch.optim.RMSprop without momentum or centering. Weight decay is added to the gradient."""

from . import checks
from .optimizer import Optimizer1State, refuse

__all__ = ["RMSprop", "RMSprop8bit", "RMSprop32bit"]


def rmsprop_checks(owner: str, alpha, momentum, centered) -> None:
    if alpha == 0:
        checks.fail(owner, "alpha must be in (0, 1): alpha=0 is not supported, got 0", NotImplementedError)
    if centered:
        checks.fail(owner, f"centered=True is not supported, got {centered!r}", NotImplementedError)
    refuse(owner, momentum != 0, f"momentum must be 0 (the update keeps no momentum buffer; bitsandbytes ignores "
                                 f"it), got {momentum!r}")


class RMSprop(Optimizer1State):
    """RMSprop; optim_bits=8 keeps 8-bit state for parameters of at least min_8bit_size elements."""

    _beta_names = ("alpha", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 optim_bits=32, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        rmsprop_checks(type(self).__name__, alpha, momentum, centered)
        super().__init__("rmsprop", params, lr, (alpha, momentum), eps, weight_decay, optim_bits, args,
                         min_8bit_size, percentile_clipping=percentile_clipping, block_wise=block_wise)


class RMSprop8bit(Optimizer1State):
    """RMSprop with 8-bit state."""

    _beta_names = ("alpha", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, args=None,
                 min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        rmsprop_checks(type(self).__name__, alpha, momentum, centered)
        super().__init__("rmsprop", params, lr, (alpha, momentum), eps, weight_decay, 8, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class RMSprop32bit(Optimizer1State):
    """RMSprop with 32-bit state."""

    _beta_names = ("alpha", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, args=None,
                 min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        rmsprop_checks(type(self).__name__, alpha, momentum, centered)
        super().__init__("rmsprop", params, lr, (alpha, momentum), eps, weight_decay, 32, args, min_8bit_size,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
