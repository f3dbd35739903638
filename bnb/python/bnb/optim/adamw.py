"""AdamW (arXiv:1711.05101): Adam with decoupled weight decay, 0.01 by default; 32-bit or 8-bit blockwise state, and
paged variants."""

from .adam import no_amsgrad
from .optimizer import Optimizer2State, fixed_bits

__all__ = ["AdamW", "AdamW8bit", "AdamW32bit", "PagedAdamW", "PagedAdamW8bit", "PagedAdamW32bit"]


class AdamW(Optimizer2State):
    """AdamW; optim_bits=8 keeps 8-bit state for parameters of at least min_8bit_size elements."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100,
                 block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         is_paged=is_paged, percentile_clipping=percentile_clipping, block_wise=block_wise)


class AdamW8bit(Optimizer2State):
    """AdamW with 8-bit state (optim_bits stays at its default: it is bitsandbytes' signature)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100,
                 block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 8)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size, is_paged=is_paged,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class AdamW32bit(Optimizer2State):
    """AdamW with 32-bit state."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100,
                 block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 32)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size, is_paged=is_paged,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdamW(Optimizer2State):
    """AdamW with paged state (bnb.optim.paged: CUDA unified memory, prefetched before each update)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         is_paged=True, percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdamW8bit(Optimizer2State):
    """AdamW with paged 8-bit state."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 8)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size, is_paged=True,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdamW32bit(Optimizer2State):
    """AdamW with paged 32-bit state."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 32)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size, is_paged=True,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
