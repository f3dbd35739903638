"""LAMB (arXiv:1904.00962): AdamW whose update is clipped to max_unorm * ||p|| (the trust ratio, on the 32-bit path;
8-bit state updates as AdamW, as in bitsandbytes), 32-bit or 8-bit blockwise state."""

from .adam import no_amsgrad
from .optimizer import Optimizer2State, refuse

__all__ = ["LAMB", "LAMB8bit", "LAMB32bit"]


def lamb_checks(owner: str, bias_correction, amsgrad, adam_w_mode) -> None:
    no_amsgrad(owner, amsgrad)
    refuse(owner, not bias_correction, f"bias_correction=False is not supported (the update always corrects the "
                                       f"moments' bias; bitsandbytes ignores it), got {bias_correction!r}")
    refuse(owner, not adam_w_mode, f"adam_w_mode=False is not supported (the weight decay is decoupled, AdamW's; "
                                   f"bitsandbytes ignores it), got {adam_w_mode!r}")


class LAMB(Optimizer2State):
    """LAMB; optim_bits=8 keeps 8-bit state (without the trust ratio) for parameters of at least min_8bit_size
    elements."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adam_w_mode=True, optim_bits=32, args=None, min_8bit_size=4096, max_unorm=1.0, *,
                 percentile_clipping=100, block_wise=True):
        lamb_checks(type(self).__name__, bias_correction, amsgrad, adam_w_mode)
        super().__init__("lamb", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         max_unorm=max_unorm, percentile_clipping=percentile_clipping, block_wise=block_wise)


class LAMB8bit(Optimizer2State):
    """LAMB with 8-bit state: no trust ratio there (parameters smaller than min_8bit_size keep 32-bit state, with
    it), so max_unorm stays at its default 1.0, as bitsandbytes requires."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adam_w_mode=True, args=None, min_8bit_size=4096, max_unorm=1.0, *,
                 percentile_clipping=100, block_wise=True):
        lamb_checks(type(self).__name__, bias_correction, amsgrad, adam_w_mode)
        refuse(type(self).__name__, max_unorm != 1.0, f"max_unorm must stay 1.0: the 8-bit update has no trust "
                                                      f"ratio (LAMB32bit has), got {max_unorm!r}")
        super().__init__("lamb", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size, max_unorm=max_unorm,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class LAMB32bit(Optimizer2State):
    """LAMB with 32-bit state."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adam_w_mode=True, args=None, min_8bit_size=4096, max_unorm=1.0, *,
                 percentile_clipping=100, block_wise=True):
        lamb_checks(type(self).__name__, bias_correction, amsgrad, adam_w_mode)
        super().__init__("lamb", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size, max_unorm=max_unorm,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
