"""The argument checks of bnb/ops/checks.cc, for the reference kernels: the kernels of every device without its own
take exactly what the C++ kernels take (any shape with the right count for code and absmax, the same dtypes, one
device), and refuse the rest with the same RuntimeError and message."""

import math

import torch

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
STORAGES = (torch.uint8, torch.bfloat16, torch.float16, torch.float32)  # what packed 4-bit codes may be viewed as
MIN_BLOCKSIZE, MAX_BLOCKSIZE = 32, 4096  # bnb::core::CheckBlocksize
MAX_BLOCKSIZE_8BIT = 1 << 30  # the 8-bit ops' blocks, as on the CPU (bnb::core::kMaxCpuBlocksize8)


def check(cond: bool, msg: str) -> None:
    # RuntimeError, as the C++ kernels' TORCH_CHECK raises: an op fails the same way on every device.
    if not cond:
        raise RuntimeError(msg)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def float_dtype(op: str, arg: str, dtype: torch.dtype) -> None:
    check(dtype in FLOATS, f"bnb::{op}: {arg} must be float32, float16 or bfloat16, got {dtype_name(dtype)}")


def dtype_is(op: str, arg: str, t: torch.Tensor, want: torch.dtype) -> None:
    check(t.dtype == want, f"bnb::{op}: {arg} must be {dtype_name(want)}, got {dtype_name(t.dtype)}")


def not_empty(op: str, arg: str, t: torch.Tensor) -> None:
    check(t.numel() != 0, f"bnb::{op}: {arg} is empty (shape {list(t.shape)}); expected at least one element")


def same_device(op: str, arg: str, t: torch.Tensor, ref: torch.Tensor, ref_name: str = "A") -> None:
    check(t.device == ref.device, f"bnb::{op}: {arg} is on {t.device} but {ref_name} is on {ref.device}")


def numel_is(op: str, arg: str, t: torch.Tensor, want: int, why: str) -> None:
    check(t.numel() == want, f"bnb::{op}: {arg} must hold {want} values ({why}), got {t.numel()} (shape "
                             f"{list(t.shape)})")


def blocksize(op: str, bs: int, largest: int = MAX_BLOCKSIZE) -> None:
    check(MIN_BLOCKSIZE <= bs <= largest and bs & (bs - 1) == 0,
          f"bnb::{op}: blocksize must be a power of two in [{MIN_BLOCKSIZE}, {largest}], got {bs}")


def num_blocks(n: int, bs: int) -> int:
    return -(-n // bs)


def float32_tensor(op: str, arg: str, t: torch.Tensor, A: torch.Tensor, numel: int, why: str,
                   ref_name: str = "A") -> None:
    """A float32 tensor of `numel` values, of any shape, on A's device: how the kernels take absmax and code."""
    dtype_is(op, arg, t, torch.float32)
    numel_is(op, arg, t, numel, why)
    same_device(op, arg, t, A, ref_name)


def finite_code(op: str, code: torch.Tensor, arg: str = "") -> None:
    """The 8-bit kernels' codebook rule (bnb::core::PrepareCodebook): every entry finite."""
    bad = (~torch.isfinite(code.reshape(-1))).nonzero()
    if bad.numel():
        i = bad[0].item()
        check(False, f"bnb::{op}: {arg}code[{i}] is {code.reshape(-1)[i].item()}; every entry must be finite")


def writable(op: str, arg: str, t: torch.Tensor) -> None:
    check(not (t.requires_grad and torch.is_grad_enabled()),
          f"bnb::{op}: {arg} requires grad; out= arguments do not support automatic differentiation (use "
          "torch.no_grad() or a tensor without grad)")


def out(op: str, t: torch.Tensor, shape, what: str, dtype: torch.dtype, A: torch.Tensor) -> None:
    """The out= argument of an .out overload: writable, of `shape`, `dtype`, on A's device."""
    writable(op, "out", t)
    check(list(t.shape) == list(shape), f"bnb::{op}: out must have {what} {list(shape)}, got {list(t.shape)}")
    dtype_is(op, "out", t, dtype)
    same_device(op, "out", t, A)


def checked_numel(op: str, arg: str, shape) -> int:
    """The element count of a shape argument (bnb::ops::CheckedNumel): no negative size, under 2^63."""
    for d in shape:
        check(d >= 0, f"bnb::{op}: {arg} {list(shape)} has a negative size")
    n = math.prod(shape)
    check(n < 2**63, f"bnb::{op}: {arg} {list(shape)} has more than 2^63 elements")
    return n


def shape_numel(op: str, arg: str, shape) -> int:
    """checked_numel, and not empty."""
    n = checked_numel(op, arg, shape)
    check(n > 0, f"bnb::{op}: {arg} {list(shape)} is empty; there is nothing to dequantize")
    return n


def storage(op: str, arg: str, dtype: torch.dtype) -> None:
    check(dtype in STORAGES, f"bnb::{op}: {arg} must be uint8, bfloat16, float16 or float32 (packed codes), got "
                             f"{dtype_name(dtype)}")


def packed_bytes(op: str, arg: str, t: torch.Tensor, n: int) -> None:
    """t holds n 4-bit codes exactly: (n + 1) // 2 bytes, stored as one of STORAGES."""
    storage(op, arg, t.dtype)
    nbytes = t.numel() * t.element_size()
    check(nbytes == (n + 1) // 2, f"bnb::{op}: {arg} holds {nbytes} bytes of packed codes; {n} values need "
                                  f"{(n + 1) // 2}")


def separate_outs(op: str, out: torch.Tensor, absmax: torch.Tensor) -> None:
    """A quantize's codes and absmax outputs must not share memory (strided views count by their whole span)."""
    def span(t):
        start = t.storage_offset() * t.element_size()
        return start, start + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()

    shared = (out.numel() > 0 and absmax.numel() > 0
              and out.untyped_storage().data_ptr() == absmax.untyped_storage().data_ptr())
    if shared:
        (a0, a1), (b0, b1) = span(out), span(absmax)
        shared = a0 < b1 and b0 < a1
    check(not shared, f"bnb::{op}: out and absmax share memory; pass separate tensors")
