"""Pure-torch reference kernels: the test oracle for every C++ kernel, and the kernel of every device that has no
C++ one (registered as CompositeExplicitAutograd, so any backend's own kernel wins over them)."""

import torch

from . import blockwise4, blockwise8

_KERNELS = {
    "quantize_blockwise": blockwise8.quantize_blockwise,
    "quantize_blockwise_into": blockwise8.quantize_blockwise_into,
    "dequantize_blockwise": blockwise8.dequantize_blockwise,
    "dequantize_blockwise.out": blockwise8.dequantize_blockwise_out,
    "quantize_4bit": blockwise4.quantize_4bit,
    "dequantize_4bit": blockwise4.dequantize_4bit,
    "dequantize_4bit.out": blockwise4.dequantize_4bit_out,
    "gemv_4bit": blockwise4.gemv_4bit,
    "gemv_4bit.out": blockwise4.gemv_4bit_out,
    "gemm_4bit": blockwise4.gemm_4bit,
}

_lib = None


def register() -> None:
    """Registers the reference kernels with the dispatcher, once."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("bnb", "IMPL")
    for name, fn in _KERNELS.items():
        _lib.impl(name, fn, "CompositeExplicitAutograd")
