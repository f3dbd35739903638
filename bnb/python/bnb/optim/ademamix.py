"""AdEMAMix (arXiv:2409.03137): Adam with a second, slow first moment m2 (beta3) mixed in by alpha:
p -= lr * (m1 / c1 + alpha * m2) / (sqrt(v) / sqrt(c2) + eps), decoupled weight decay (0.01 by default). state1
holds m1 and m2 ([2, *shape]; 8-bit: absmax1 [2, blocks]). t_alpha and t_beta3 warm alpha and beta3 up over that
many steps, as the paper (and bitsandbytes) schedule them. 32-bit or 8-bit blockwise state, and paged variants."""

import math
from typing import Iterable, Literal, Optional

import torch

from .optimizer import Optimizer2State

__all__ = ["AdEMAMix", "AdEMAMix8bit", "AdEMAMix32bit", "PagedAdEMAMix", "PagedAdEMAMix8bit",
           "PagedAdEMAMix32bit", "scheduled_alpha", "scheduled_beta3"]


def scheduled_alpha(step: int, alpha: float, t_alpha: Optional[float]) -> float:
    """alpha rising linearly from 0 to alpha over t_alpha steps."""
    return min(step * alpha / t_alpha, alpha) if t_alpha else alpha


def scheduled_beta3(step: int, beta1: float, beta3: float, t_beta3: Optional[float]) -> float:
    """beta3 rising from beta1 to beta3 over t_beta3 steps, so that the half-life of m2 grows linearly."""
    if not t_beta3:
        return beta3
    ln1, ln3 = math.log(beta1), math.log(beta3)
    s = step / t_beta3
    return min(math.exp(ln1 * ln3 / ((1 - s) * ln3 + s * ln1)), beta3)


class AdEMAMix(Optimizer2State):
    """AdEMAMix; optim_bits=8 keeps 8-bit state for parameters of at least min_8bit_size elements."""

    _halves = 2

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999), alpha: float = 5.0,
                 t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, eps: float = 1e-8,
                 weight_decay: float = 1e-2, optim_bits: Literal[8, 32] = 32, min_8bit_size: int = 4096,
                 is_paged: bool = False, *, percentile_clipping: int = 100, block_wise: bool = True):
        super().__init__("ademamix", params=params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         optim_bits=optim_bits, args=None, min_8bit_size=min_8bit_size, is_paged=is_paged,
                         alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3, percentile_clipping=percentile_clipping,
                         block_wise=block_wise)

    def _beta3_alpha(self, config: dict, step: int) -> tuple[float, float]:
        beta1, _, beta3 = config["betas"]
        return (scheduled_beta3(step, beta1, beta3, config["t_beta3"]),
                scheduled_alpha(step, config["alpha"], config["t_alpha"]))


class AdEMAMix8bit(AdEMAMix):
    """AdEMAMix with 8-bit state."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999), alpha: float = 5.0,
                 t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, eps: float = 1e-8,
                 weight_decay: float = 1e-2, min_8bit_size: int = 4096, is_paged: bool = False, *,
                 percentile_clipping: int = 100, block_wise: bool = True):
        super().__init__(params, lr=lr, betas=betas, alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3, eps=eps,
                         weight_decay=weight_decay, optim_bits=8, min_8bit_size=min_8bit_size, is_paged=is_paged,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class AdEMAMix32bit(AdEMAMix):
    """AdEMAMix with 32-bit state."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999), alpha: float = 5.0,
                 t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, eps: float = 1e-8,
                 weight_decay: float = 1e-2, min_8bit_size: int = 4096, is_paged: bool = False, *,
                 percentile_clipping: int = 100, block_wise: bool = True):
        super().__init__(params, lr=lr, betas=betas, alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3, eps=eps,
                         weight_decay=weight_decay, optim_bits=32, min_8bit_size=min_8bit_size, is_paged=is_paged,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdEMAMix(AdEMAMix):
    """AdEMAMix with paged state (bnb.optim.paged: CUDA unified memory, prefetched before each update)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999), alpha: float = 5.0,
                 t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, eps: float = 1e-8,
                 weight_decay: float = 1e-2, optim_bits: Literal[8, 32] = 32, min_8bit_size: int = 4096, *,
                 percentile_clipping: int = 100, block_wise: bool = True):
        super().__init__(params, lr=lr, betas=betas, alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3, eps=eps,
                         weight_decay=weight_decay, optim_bits=optim_bits, min_8bit_size=min_8bit_size,
                         is_paged=True, percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdEMAMix8bit(AdEMAMix8bit):
    """AdEMAMix with paged 8-bit state."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999), alpha: float = 5.0,
                 t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, eps: float = 1e-8,
                 weight_decay: float = 1e-2, min_8bit_size: int = 4096, *, percentile_clipping: int = 100,
                 block_wise: bool = True):
        super().__init__(params, lr=lr, betas=betas, alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3, eps=eps,
                         weight_decay=weight_decay, min_8bit_size=min_8bit_size, is_paged=True,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)


class PagedAdEMAMix32bit(AdEMAMix32bit):
    """AdEMAMix with paged 32-bit state."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3,
                 betas: tuple[float, float, float] = (0.9, 0.999, 0.9999), alpha: float = 5.0,
                 t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, eps: float = 1e-8,
                 weight_decay: float = 1e-2, min_8bit_size: int = 4096, *, percentile_clipping: int = 100,
                 block_wise: bool = True):
        super().__init__(params, lr=lr, betas=betas, alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3, eps=eps,
                         weight_decay=weight_decay, min_8bit_size=min_8bit_size, is_paged=True,
                         percentile_clipping=percentile_clipping, block_wise=block_wise)
