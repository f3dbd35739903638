"""Adam (arXiv:1412.6980) with 32-bit or 8-bit blockwise state, and its paged variants. As bitsandbytes' Adam, the
weight decay is decoupled (p *= 1 - lr * weight_decay, AdamW's): Adam and AdamW differ in their default only."""

from .optimizer import Optimizer2State, fixed_bits, refuse

__all__ = ["Adam", "Adam8bit", "Adam32bit", "PagedAdam", "PagedAdam8bit", "PagedAdam32bit"]


def no_amsgrad(owner: str, amsgrad: bool) -> None:
    refuse(owner, bool(amsgrad), f"amsgrad=True is not supported (the update keeps no maximum of the second "
                                 f"moment; bitsandbytes ignores the argument), got amsgrad={amsgrad!r}")


class Adam(Optimizer2State):
    """Adam; optim_bits=8 keeps 8-bit state for parameters of at least min_8bit_size elements."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         is_paged=is_paged, percentile_clipping=percentile_clipping, block_wise=block_wise)


class Adam8bit(Optimizer2State):
    """Adam with 8-bit state (optim_bits stays at its default: it is bitsandbytes' signature)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 8)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size, is_paged=is_paged,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class Adam32bit(Optimizer2State):
    """Adam with 32-bit state."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 32)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size, is_paged=is_paged,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdam(Optimizer2State):
    """Adam with paged state (bnb.optim.paged: CUDA unified memory, prefetched before each update); is_paged is
    bitsandbytes' unused argument."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         is_paged=True, percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdam8bit(Optimizer2State):
    """Adam with paged 8-bit state."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 8)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size, is_paged=True,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdam32bit(Optimizer2State):
    """Adam with paged 32-bit state."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, is_paged=False, *, percentile_clipping=100, block_wise=True):
        no_amsgrad(type(self).__name__, amsgrad)
        fixed_bits(type(self).__name__, optim_bits, 32, 32)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size, is_paged=True,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
