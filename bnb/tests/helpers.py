"""Shared by the pytest files: devices present, dtypes, and a bit-exact tensor comparison."""

import torch

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BLOCKSIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096]


def devices():
    """Every device bnb has kernels for that is present here; CUDA tests skip without a GPU."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def assert_same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal dtype, shape and bits; NaN equals NaN (payloads aside)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    a, b = a.cpu(), b.cpu()
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        a = torch.where(both_nan, 0, a)
        b = torch.where(both_nan, 0, b)
        ints = {2: torch.int16, 4: torch.int32}[a.element_size()]
        a, b = a.view(ints), b.view(ints)
    mismatch = (a != b).nonzero()
    assert mismatch.numel() == 0, f"{mismatch.shape[0]} elements differ, first at {mismatch[0].tolist()}"
