"""Shared by the pytest files: devices present, dtypes, test data and a bit-exact tensor comparison."""

from fractions import Fraction

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


def sample(n, dtype, seed=0, specials=False):
    """randn * 3 as `dtype`; with specials (n > 600), a zero block, NaN, +-inf and float32 and float16 subnormals."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 3
    if specials and n > 600:
        x[:64] = 0
        x[300] = float("nan")
        x[450], x[451] = float("inf"), float("-inf")
        x[520:580] = torch.arange(520, 580) * 2.0**-140  # float32 subnormals
        x[600] = 6.0e-8  # a float16 subnormal
    return x.to(dtype)


def values_around_midpoints(values: list[float]) -> list[float]:
    """For each pair of neighbouring sorted float32 values: their midpoint rounded to float32 and the floats just
    below and above it, where a nearest-value rule is easiest to get wrong."""
    s = sorted(set(values))
    mids = (torch.tensor(s[:-1]) + torch.tensor(s[1:])) * 0.5
    below = torch.nextafter(mids, torch.full_like(mids, -2.0))
    above = torch.nextafter(mids, torch.full_like(mids, 2.0))
    return torch.cat([below, mids, above]).tolist()


def exactly_nearest_codes(v: list[float], code: list[float]) -> list[int]:
    """The code of each float v in `code`, by exact rational distances: the nearest value, an exact tie to the
    lower value, equal values to the lowest code. Slow, independent of every rule the kernels use."""
    exact = [Fraction(c) for c in code]
    out = []
    for x in v:
        fx = Fraction(x)
        out.append(min(range(len(code)), key=lambda k: (abs(fx - exact[k]), exact[k], k)))
    return out
