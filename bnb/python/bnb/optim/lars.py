"""LARS (arXiv:1708.03888): SGD with momentum whose update is clipped to max_unorm * ||p|| (the trust ratio, on the
32-bit path; 8-bit state updates without it, as in bitsandbytes), and PytorchLARS, the same in plain torch."""

import torch

from . import checks
from .optimizer import Optimizer1State
from .sgd import momentum_checks

__all__ = ["LARS", "LARS8bit", "LARS32bit", "PytorchLARS"]


class LARS(Optimizer1State):
    """LARS; optim_bits=8 keeps 8-bit state (without the trust ratio) for parameters of at least min_8bit_size
    elements."""

    _beta_names = ("momentum", "dampening")

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, optim_bits=32, args=None,
                 min_8bit_size=4096, max_unorm=0.02, *, percentile_clipping=100, block_wise=True):
        momentum_checks(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("lars", params, lr, (momentum, dampening), 0.0, weight_decay, optim_bits, args,
                         min_8bit_size, max_unorm=max_unorm, percentile_clipping=percentile_clipping,
                         block_wise=block_wise)


class LARS8bit(Optimizer1State):
    """LARS with 8-bit state: no trust ratio there (parameters smaller than min_8bit_size keep 32-bit state, with
    it)."""

    _beta_names = ("momentum", "dampening")

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, max_unorm=0.02, *, percentile_clipping=100, block_wise=True):
        momentum_checks(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("lars", params, lr, (momentum, dampening), 0.0, weight_decay, 8, args, min_8bit_size,
                         max_unorm=max_unorm, percentile_clipping=percentile_clipping, block_wise=block_wise)


class LARS32bit(Optimizer1State):
    """LARS with 32-bit state."""

    _beta_names = ("momentum", "dampening")

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, max_unorm=0.02, *, percentile_clipping=100, block_wise=True):
        momentum_checks(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("lars", params, lr, (momentum, dampening), 0.0, weight_decay, 32, args, min_8bit_size,
                         max_unorm=max_unorm, percentile_clipping=percentile_clipping, block_wise=block_wise)


class PytorchLARS(torch.optim.Optimizer):
    """LARS in plain torch (bitsandbytes' PytorchLARS): torch.optim.SGD's momentum (with dampening and Nesterov),
    then the update scaled down to max_unorm * ||p|| where its norm is larger (max_unorm 0: no clipping)."""

    def __init__(self, params, lr=0.01, momentum=0, dampening=0, weight_decay=0, nesterov=False, max_unorm=0.02):
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay),
                            ("max_unorm", max_unorm)):
            checks.at_least_zero("PytorchLARS", name, value)
        if nesterov and (momentum <= 0 or dampening != 0):
            checks.fail("PytorchLARS", f"nesterov needs momentum > 0 and dampening 0, got momentum={momentum!r}, "
                                       f"dampening={dampening!r}")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, max_unorm=max_unorm)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad
                if group["weight_decay"] != 0:
                    d_p = d_p.add(p, alpha=group["weight_decay"])
                update = d_p
                if group["momentum"] != 0:
                    buf = self.state[p].get("momentum_buffer")
                    if buf is None:
                        buf = self.state[p]["momentum_buffer"] = d_p.clone()
                    else:
                        buf.mul_(group["momentum"]).add_(d_p, alpha=1 - group["dampening"])
                    update = d_p + buf * group["momentum"] if group["nesterov"] else buf
                scale = 1.0
                if group["max_unorm"] > 0.0:
                    limit = group["max_unorm"] * torch.linalg.vector_norm(p)
                    unorm = torch.linalg.vector_norm(update)
                    scale = torch.where(unorm > limit, limit / unorm, torch.ones_like(unorm))
                p.add_(update * scale, alpha=-group["lr"])
        return loss
