"""bitsandbytes-compatible functional API: blockwise 8-bit and 4-bit quantization with QuantState, codebooks,
LLM.int8()'s int8 helpers and the optimizer updates, over torch.ops.bnb.*."""

from __future__ import annotations

from typing import Optional

import itertools

import torch

from . import _C
from . import cpu_layout
from .quant_state import QuantState

__all__ = [
    "QuantState", "create_dynamic_map", "quantize_blockwise", "dequantize_blockwise", "get_4bit_type",
    "quantize_4bit", "dequantize_4bit", "quantize_nf4", "quantize_fp4", "dequantize_nf4", "dequantize_fp4",
    "gemv_4bit", "has_avx512bf16", "create_linear_map", "create_normal_map", "create_fp8_map",
    "int8_vectorwise_quant", "int8_vectorwise_dequant", "int8_double_quant", "int8_linear_matmul", "int8_mm_dequant",
    "int8_scaled_mm", "optimizer_update_32bit", "optimizer_update_8bit_blockwise", "percentile_clipping",
]

_BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)

def has_avx512bf16() -> bool:
    """Whether this CPU has the AVX512-BF16 instructions, by CPUID (torch's cpuinfo), as bitsandbytes asks its own
    library. False on CPUs of other architectures."""
    return bool(torch.cpu.get_capabilities().get("avx512_bf16", False))


def create_dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> torch.Tensor:
    """The dynamic quantization map (arXiv:1511.04561): 256 sorted float32 values, equal to bitsandbytes'."""
    return torch.tensor(_C.create_dynamic_map(signed, max_exponent_bits, total_bits), dtype=torch.float32)


def create_linear_map(signed: bool = True, total_bits: int = 8, add_zero: bool = True) -> torch.Tensor:
    """bitsandbytes' linear map: 256 float32 values, evenly spaced in [-1, 1] (signed) or [0, 1]. A signed map (or
    one of fewer than 8 bits) keeps a zero by using one value fewer, 2**total_bits - 1; a map of fewer than 256 values
    is padded with zeros in its middle, as the 8-bit kernels index 256 entries."""
    if not 1 <= total_bits <= 8:
        raise ValueError(f"create_linear_map: total_bits must be in [1, 8], got {total_bits}")
    n = 2**total_bits
    if (add_zero or total_bits < 8) and signed:
        n -= 1
    values = torch.linspace(-1.0 if signed else 0.0, 1.0, n, dtype=torch.float32)
    half = n // 2
    return torch.cat([values[:half], torch.zeros(256 - n), values[half:]])


def create_normal_map(offset: float = 0.9677083, use_extra_value: bool = True) -> torch.Tensor:
    """bitsandbytes' NormalFloat map (QLoRA, arXiv:2305.14314): quantiles of N(0, 1) at evenly spaced probabilities
    from 0.5 to `offset`, normalized to [-1, 1]; 8 positive and 7 negative values (use_extra_value) or 7 and 7, a
    zero, and zeros to 256 entries, sorted. The default offset gives NF4's 16 values exactly. torch.special.ndtri
    stands in for scipy's norm.ppf, at the same float32 probabilities (so no scipy is needed)."""
    if not 0.5 < offset < 1.0:
        raise ValueError(f"create_normal_map: offset must be in (0.5, 1), got {offset}")

    def quantiles(count: int) -> torch.Tensor:  # ndtri of the float32 probabilities, in float64 as scipy's
        return torch.special.ndtri(torch.linspace(offset, 0.5, count + 1, dtype=torch.float32)[:-1].double())

    positive = quantiles(8 if use_extra_value else 7)
    negative = -quantiles(7)
    values = torch.cat([positive, torch.zeros(256 - positive.numel() - 7, dtype=torch.float64), negative])
    values = values.float().sort().values
    return values / values.max()


def create_fp8_map(signed: bool = True, exponent_bits: int = 5, precision_bits: int = 2,
                   total_bits: int = 8) -> torch.Tensor:
    """bitsandbytes' floating-point map of exponent_bits + precision_bits (+ a sign bit) = total_bits: every value of
    the format (exponent field 0: subnormals), sorted, divided by the largest, padded with zeros to 256 entries. As
    in bitsandbytes, exponent field e scales by 2**(bias + 1 - e) with bias 2**(exponent_bits - 1): larger fields
    are smaller values (after normalization only the set of values matters)."""
    if exponent_bits + precision_bits != total_bits - (1 if signed else 0):
        raise ValueError(f"create_fp8_map: exponent_bits ({exponent_bits}) + precision_bits ({precision_bits}) must be "
                         f"total_bits ({total_bits}) less the sign bit ({int(signed)})")
    if not 1 <= total_bits <= 8 or exponent_bits < 0 or precision_bits < 0:
        raise ValueError(f"create_fp8_map: expected bit counts >= 0 and total_bits in [1, 8], got exponent_bits="
                         f"{exponent_bits}, precision_bits={precision_bits}, total_bits={total_bits}")
    bias = 2 ** (exponent_bits - 1)
    values = []
    for field in range(2**exponent_bits):
        for bits in itertools.product([0, 1], repeat=precision_bits):
            mantissa = sum(b * 2.0 ** -(i + 1) for i, b in enumerate(bits))
            value = mantissa * 2.0**-bias if field == 0 else (1 + mantissa) * 2.0 ** (bias + 1 - field)
            values += [value, -value] if signed else [value]
    code = torch.tensor(sorted(values + [0.0] * (256 - len(values))), dtype=torch.float32)
    return code / code.max()


# Codebooks by name ("dynamic": the signed dynamic map, the default code). Made at import (256 values, microseconds)
# rather than on first use: torch.compile cannot trace the C++ call that makes it, so a compiled function that was
# the first to use the default code failed under fullgraph=True.
name2qmap: dict[str, torch.Tensor] = {"dynamic": create_dynamic_map()}


def _dynamic_map(device: torch.device) -> torch.Tensor:
    if "dynamic" not in name2qmap:  # removed by the user: made again (eagerly)
        name2qmap["dynamic"] = create_dynamic_map()
    return name2qmap["dynamic"].to(device)


def quantize_blockwise(
    A: torch.Tensor,
    code: Optional[torch.Tensor] = None,
    absmax: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: int = 4096,
    nested: bool = False,
) -> tuple[torch.Tensor, QuantState]:
    """Quantizes A (float32/float16/bfloat16) in blocks of `blocksize` values to 8-bit codes of `code` (default:
    the signed dynamic map). nested=True quantizes the absmax values too (minus their mean, the offset).
    `out` (uint8, A's shape) and `absmax` (float32, one per block), when given, receive the results in place
    (with nested=True, `absmax` receives the quantized absmax). Returns (codes, QuantState)."""
    code = _dynamic_map(A.device) if code is None else code.to(A.device)
    if out is not None or absmax is not None:
        # Every argument is checked before anything of the user's is written. The op's Meta kernel checks A, code
        # and blocksize and sizes absmax by the op's own rule.
        _, want = torch.ops.bnb.quantize_blockwise(torch.empty_like(A, device="meta"), code.to("meta"), blocksize)
        if nested and absmax is not None and (absmax.dtype != torch.uint8 or absmax.shape != want.shape):
            raise ValueError(f"quantize_blockwise: with nested=True, absmax receives the {want.numel()} quantized "
                             f"absmax codes: expected torch.uint8 of shape {tuple(want.shape)}, got {absmax.dtype} of "
                             f"shape {tuple(absmax.shape)}")
    if out is not None or (absmax is not None and not nested):
        codes = out if out is not None else torch.empty(A.shape, dtype=torch.uint8, device=A.device)
        _absmax = absmax if absmax is not None and not nested else torch.empty_like(want, device=A.device)
        torch.ops.bnb.quantize_blockwise_into(A, code, blocksize, codes, _absmax)
    else:
        codes, _absmax = torch.ops.bnb.quantize_blockwise(A, code, blocksize)
    if nested:
        offset = _absmax.mean()
        qabsmax, state2 = quantize_blockwise(_absmax - offset, blocksize=blocksize, nested=False)
        state = QuantState(absmax=qabsmax, code=code.clone(), blocksize=blocksize, dtype=A.dtype, offset=offset,
                           state2=state2)
    else:
        state = QuantState(absmax=_absmax, code=code.clone(), blocksize=blocksize, dtype=A.dtype)
    if absmax is not None and nested:
        state.absmax = absmax.copy_(state.absmax)
    return codes, state


def dequantize_blockwise(
    A: torch.Tensor,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[torch.Tensor] = None,
    code: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: int = 4096,
    nested: bool = False,
) -> torch.Tensor:
    """Undoes quantize_blockwise. Takes the QuantState, or absmax (+ code, blocksize; dtype float32) without one;
    writes into `out` when given."""
    if quant_state is None and absmax is None:
        raise ValueError("dequantize_blockwise requires either quant_state or absmax")
    if quant_state is None:
        code = _dynamic_map(A.device) if code is None else code
        blocks = -(-A.numel() // blocksize) if blocksize > 0 else None
        if blocks is not None and absmax.numel() != blocks:  # most often a blocksize left at its default
            raise ValueError(f"dequantize_blockwise: absmax holds {absmax.numel()} values, but A's {A.numel()} in "
                             f"blocks of {blocksize} need {blocks}; pass the blocksize A was quantized with")
        quant_state = QuantState(absmax=absmax, code=code, blocksize=blocksize, dtype=torch.float32)
    absmax = quant_state.absmax
    if quant_state.nested:
        absmax = dequantize_blockwise(quant_state.absmax, quant_state.state2) + quant_state.offset
        absmax = absmax.float()
    code = quant_state.code.to(A.device)
    if out is not None:
        torch.ops.bnb.dequantize_blockwise.out(A, absmax, code, quant_state.blocksize, quant_state.dtype, out=out)
        return out
    return torch.ops.bnb.dequantize_blockwise(A, absmax, code, quant_state.blocksize, quant_state.dtype)


# Codebooks get_4bit_type offers beside the two the kernels quantize to, in bitsandbytes' order: symmetric int4,
# and AbnormalFloat4 for blocksize 64 as published (Yoshida, arXiv:2306.06965), largest first.
_INT4 = [7, 6, 5, 4, 3, 2, 1, 0, -0.0, -1, -2, -3, -4, -5, -6, -7]
_AF4_BS64 = [1.0, 0.72424863, 0.55496234, 0.42563882, 0.31675666, 0.21961274, 0.12934483, 0.04273164, 0.0,
             -0.04934812, -0.14982478, -0.25607552, -0.3736951, -0.51243739, -0.69441008, -1.0]


def get_4bit_type(typename: str, device=None, blocksize: int = 64) -> torch.Tensor:
    """The 16 code values of "nf4" or "fp4" (bitsandbytes', FP4 normalized to [-1, 1]), or of "int4" and "af4"
    (blocksize 64 only), as float32 in [-1, 1]. quantize_4bit takes nf4 and fp4; the others are codebooks only."""
    from .reference.blockwise4 import code4
    if typename in ("nf4", "fp4"):
        return code4(typename, device)
    if typename == "int4":
        return torch.tensor(_INT4, dtype=torch.float32, device=device) / 7
    if typename == "af4":
        if blocksize != 64:
            raise NotImplementedError(f"4-bit AbnormalFloats are published for blocksize 64 only, got {blocksize}")
        return torch.tensor(_AF4_BS64, dtype=torch.float32, device=device)
    raise NotImplementedError(f"Typename {typename} not supported (bnb has nf4, fp4, int4 and af4)")


_CODE4: dict = {}


def _code4(quant_type: str, device: torch.device) -> torch.Tensor:
    """get_4bit_type(quant_type) on `device`, made once per pair for the ops to read: a table per call cost a
    1-token Linear4bit a sixth of its time. Never handed out (users may write into what get_4bit_type returns);
    under torch.compile a fresh one, a constant of the graph rather than a guarded global."""
    if torch.compiler.is_compiling():
        return get_4bit_type(quant_type, device=device)
    key = (quant_type, device)
    code = _CODE4.get(key)
    if code is None:
        code = _CODE4[key] = get_4bit_type(quant_type, device=device)
    return code


def _check_4bit(blocksize: int, quant_type: str, dtype: torch.dtype, what: str) -> None:
    if blocksize not in _BLOCKSIZES:
        raise ValueError(f"invalid blocksize {blocksize}: expected one of {_BLOCKSIZES}")
    if quant_type not in ("nf4", "fp4"):
        raise ValueError(f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}")
    if dtype not in _FLOATS:
        raise ValueError(f"{what} supports float32, float16 and bfloat16, got {dtype}")


def quantize_4bit(
    A: torch.Tensor,
    absmax: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: Optional[int] = None,
    compress_statistics: bool = False,
    quant_type: str = "fp4",
    quant_storage: torch.dtype = torch.uint8,
) -> tuple[torch.Tensor, QuantState]:
    """Quantizes A to 4-bit NF4/FP4 codes in blocks of `blocksize` (default 64), packed two per byte in a
    (n+1)//(2*itemsize) x 1 tensor of `quant_storage`. compress_statistics quantizes the absmax values to 8 bits
    (blocksize 256, minus their mean). Returns (packed, QuantState)."""
    blocksize = 64 if blocksize is None else blocksize
    _check_4bit(blocksize, quant_type, A.dtype, "4-bit quantization")
    float_absmax = absmax if absmax is not None and not compress_statistics else None
    if out is not None or float_absmax is not None:
        # Straight into the given tensors (quantize_4bit_into), after every check.
        packed_shape, absmax_shape = _check_4bit_outputs(A, out, absmax, blocksize, quant_type, quant_storage,
                                                         compress_statistics)
        packed = out if out is not None else torch.empty(packed_shape, dtype=quant_storage, device=A.device)
        _absmax = float_absmax if float_absmax is not None else torch.empty(absmax_shape, device=A.device)
        torch.ops.bnb.quantize_4bit_into(A, blocksize, quant_type, packed, _absmax)
    else:
        if absmax is not None:
            _check_4bit_outputs(A, out, absmax, blocksize, quant_type, quant_storage, compress_statistics)
        packed, _absmax = torch.ops.bnb.quantize_4bit(A, blocksize, quant_type, quant_storage)
    code = get_4bit_type(quant_type, device=A.device)
    if compress_statistics:
        offset = _absmax.mean()
        qabsmax, state2 = quantize_blockwise(_absmax - offset, blocksize=256)
        state = QuantState(absmax=qabsmax, shape=A.shape, dtype=A.dtype, blocksize=blocksize, code=code,
                           quant_type=quant_type, offset=offset, state2=state2)
    else:
        state = QuantState(absmax=_absmax, shape=A.shape, dtype=A.dtype, blocksize=blocksize, code=code,
                           quant_type=quant_type)
    if absmax is not None and compress_statistics:  # absmax receives the 8-bit codes, as in bitsandbytes
        state.absmax = absmax.copy_(state.absmax)
    return packed, state


def _check_4bit_outputs(A, out, absmax, blocksize, quant_type, quant_storage, compress_statistics):
    """Checks quantize_4bit's out= and absmax= before anything of the user's is written (a wrong shape or dtype is
    named, never broadcast or converted), and returns the packed and absmax shapes. The op's Meta kernel checks A
    and sizes both by the op's own rule."""
    want_packed, want_absmax = torch.ops.bnb.quantize_4bit(torch.empty_like(A, device="meta"), blocksize,
                                                           quant_type, quant_storage)
    # With compress_statistics, absmax receives the 8-bit codes of the absmax values (as in bitsandbytes).
    absmax_dtype = torch.uint8 if compress_statistics else torch.float32
    for name, given, dtype, shape in (("out", out, quant_storage, want_packed.shape),
                                      ("absmax", absmax, absmax_dtype, want_absmax.shape)):
        if given is not None and (given.dtype != dtype or given.shape != shape):
            raise ValueError(f"quantize_4bit: {name} must be {dtype} of shape {tuple(shape)} for A of shape "
                             f"{tuple(A.shape)} (blocksize {blocksize}, compress_statistics={compress_statistics}), "
                             f"got {given.dtype} of shape {tuple(given.shape)}")
        if given is not None and given.requires_grad and torch.is_grad_enabled():  # as the 8-bit op refuses it
            raise RuntimeError(f"quantize_4bit: {name} requires grad; out= arguments do not support automatic "
                               "differentiation (use torch.no_grad() or a tensor without grad)")
    return want_packed.shape, want_absmax.shape


def _scale_args(state: QuantState) -> tuple:
    """gemv_4bit's and gemm_4bit's absmax and (absmax_8bit, absmax_code, absmax_offset): the float32 absmax and
    Nones, or, for nested statistics, the 8-bit codes' scales and the nested statistics, as the schemas take them."""
    if not state.nested:
        return state.absmax, (None, None, None)
    if state.state2.blocksize != 256:  # the ops' nested blocksize; any other is dequantized here
        return _absmax_of(state), (None, None, None)
    offset = state.offset if isinstance(state.offset, torch.Tensor) else torch.tensor(float(state.offset))
    return state.state2.absmax, (state.absmax, state.state2.code, offset.to(state.absmax.device))


def _absmax_of(state: QuantState) -> torch.Tensor:
    """The float32 absmax per block, undoing nested quantization."""
    if not state.nested:
        return state.absmax
    return (dequantize_blockwise(state.absmax, state.state2) + state.offset).float()


def dequantize_4bit(
    A: torch.Tensor,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    blocksize: Optional[int] = None,
    quant_type: str = "fp4",
) -> torch.Tensor:
    """Undoes quantize_4bit. Without a quant_state, takes absmax and out (whose shape and dtype are the
    result's)."""
    if quant_state is None:
        if absmax is None or out is None:
            raise ValueError("dequantize_4bit requires both absmax and out when quant_state is not provided")
        quant_state = QuantState(absmax=absmax, shape=out.shape, dtype=out.dtype,
                                 blocksize=64 if blocksize is None else blocksize, quant_type=quant_type)
    out = _dequantize_4bit(A, quant_state, out)
    # As bitsandbytes: packed codes of shape (1, n) are a transposed weight's (B.t()), and come back transposed.
    return out.t() if A.dim() == 2 and A.shape[0] == 1 and out.dim() == 2 else out


def _dequantize_4bit(A: torch.Tensor, quant_state: QuantState, out: Optional[torch.Tensor] = None,
                     dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The weight of shape quant_state.shape, whatever A's layout (the modules' and matmul_4bit's form), in `dtype`
    (default: the state's), computed there directly rather than rounded to the state's dtype first. A weight in
    the tiled CPU layout (cpu_layout) is read through bitsandbytes' bytes unpacked from it."""
    A, quant_state = cpu_layout.plain_form(A, quant_state)
    _check_4bit(quant_state.blocksize, quant_state.quant_type, quant_state.dtype, "4-bit dequantization")
    absmax = _absmax_of(quant_state)
    dtype = quant_state.dtype if dtype is None else dtype
    args = (A, absmax, quant_state.blocksize, quant_state.quant_type, list(quant_state.shape), dtype)
    if out is not None:
        torch.ops.bnb.dequantize_4bit.out(*args, out=out)
        return out
    return torch.ops.bnb.dequantize_4bit(*args)


def quantize_fp4(A, absmax=None, out=None, blocksize=None, compress_statistics=False, quant_storage=torch.uint8):
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "fp4", quant_storage)


def quantize_nf4(A, absmax=None, out=None, blocksize=None, compress_statistics=False, quant_storage=torch.uint8):
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "nf4", quant_storage)


def dequantize_fp4(A, quant_state=None, absmax=None, out=None, blocksize=None):
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "fp4")


def dequantize_nf4(A, quant_state=None, absmax=None, out=None, blocksize=None):
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "nf4")


def gemv_4bit(A: torch.Tensor, B: torch.Tensor, out: Optional[torch.Tensor] = None, transposed_A: bool = False,
              transposed_B: bool = False, state: Optional[QuantState] = None) -> torch.Tensor:
    """A (one row, leading dimensions of 1) times the 4-bit weight B (quant state `state`) transposed:
    F.linear(A, dequantize_4bit(B, state)) without materializing the weight."""
    if state is None:
        raise ValueError("state cannot be None. gemv_4bit() requires the state from quantize_4bit()")
    return _gemv_4bit(A, B, state, state.code, out)


def _gemv_4bit(A: torch.Tensor, B: torch.Tensor, state: QuantState, code: torch.Tensor,
               out: Optional[torch.Tensor] = None) -> torch.Tensor:
    B, state = cpu_layout.plain_form(B, state)  # a weight in the tiled CPU layout: bitsandbytes' bytes
    # Nested statistics go to the op as they are: the CPU kernel reads them a band at a time, where a float32
    # absmax of the whole weight, made per call, cost more than the product of a small weight.
    absmax, nested = _scale_args(state)
    args = (A, B, list(state.shape), absmax, code, state.blocksize, *nested)
    if isinstance(B, torch.nn.Parameter) and not torch.compiler.is_compiling():
        # A Parameter's __torch_function__ (Params4bit's, which shards itself for FSDP, runs in Python) adds a fifth
        # to a 1-token product of a small layer; for an op it only defers to the plain tensor's, so skip it.
        with torch._C.DisableTorchFunctionSubclass():
            return _gemv_4bit_call(args, out)
    return _gemv_4bit_call(args, out)


def _gemv_4bit_call(args: tuple, out: Optional[torch.Tensor]) -> torch.Tensor:
    if out is not None:
        torch.ops.bnb.gemv_4bit.out(*args, out=out)
        return out
    return torch.ops.bnb.gemv_4bit(*args)


# LLM.int8() (arXiv:2208.07339): row-wise int8 quantization with outlier columns, int8 products, dequantization.
# Thin wrappers over torch.ops.bnb.int8_*, with bitsandbytes' signatures; the ops check every argument.

def int8_vectorwise_quant(A: torch.Tensor, threshold: float = 0.0):
    """A (float32/float16/bfloat16) quantized row by row to int8: (codes, row absmax as float32, outlier columns).
    With threshold > 0, columns holding any |x| >= threshold are outliers: reported (ascending int64), left out of
    the absmax, and their codes are 0; with threshold 0 the third output is None."""
    return torch.ops.bnb.int8_vectorwise_quant(A, threshold)


def int8_vectorwise_dequant(A: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    """int8 codes times their row's stats / 127, as float32."""
    return torch.ops.bnb.int8_vectorwise_dequant(A, stats)


def int8_double_quant(A: torch.Tensor, col_stats=None, row_stats=None, out_col=None, out_row=None,
                      threshold: float = 0.0):
    """A quantized row-wise and column-wise: (row codes, column codes, row stats, column stats, outlier columns).
    As in bitsandbytes, preallocated outputs are refused."""
    for name, given in (("col_stats", col_stats), ("row_stats", row_stats), ("out_col", out_col),
                        ("out_row", out_row)):
        if given is not None:
            raise ValueError(f"{name} must be None. int8_double_quant() does not support pre-allocated {name}.")
    return torch.ops.bnb.int8_double_quant(A, threshold)


def int8_linear_matmul(A: torch.Tensor, B: torch.Tensor, out: Optional[torch.Tensor] = None,
                       dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """A @ B.T of int8 A [..., K] and B [N, K], exactly, as int32 (into `out` when given)."""
    if dtype != torch.int32:
        raise ValueError(f"int8_linear_matmul: dtype must be torch.int32 (the exact sums), got {dtype}")
    if out is not None:
        torch.ops.bnb.int8_linear_matmul.out(A, B, out=out)
        return out
    return torch.ops.bnb.int8_linear_matmul(A, B)


def int8_mm_dequant(A: torch.Tensor, row_stats: torch.Tensor, col_stats: torch.Tensor,
                    out: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                    dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The int32 product A of int8_linear_matmul scaled back: A * row_stats * col_stats / 127^2 (+ bias), float16 by
    default as in bitsandbytes. With `out`, computed in out's dtype (rounded once) and written there; `dtype`, when
    also given, must agree."""
    if out is not None:
        if dtype is not None and dtype != out.dtype:
            raise ValueError(f"int8_mm_dequant: dtype {dtype} disagrees with out's dtype {out.dtype}")
        if out.shape != A.shape:  # copy_ would broadcast a wrong shape silently
            raise ValueError(f"int8_mm_dequant: out must have A's shape {list(A.shape)}, got {list(out.shape)}")
        dtype = out.dtype
    result = torch.ops.bnb.int8_mm_dequant(A, row_stats, col_stats, dtype, bias)
    return out.copy_(result) if out is not None else result


def int8_scaled_mm(A: torch.Tensor, B: torch.Tensor, row_stats: torch.Tensor, col_stats: torch.Tensor,
                   bias: Optional[torch.Tensor] = None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """int8_mm_dequant(int8_linear_matmul(A, B), row_stats, col_stats, bias) in one op (float16 by default)."""
    return torch.ops.bnb.int8_scaled_mm(A, B, row_stats, col_stats, bias, dtype)


# Optimizer updates (bnb.optim's): bitsandbytes' wrappers of torch.ops.bnb.optimizer_update_*, and its percentile
# clipping in plain torch.

def optimizer_update_32bit(optimizer_name: str, g: torch.Tensor, p: torch.Tensor, state1: torch.Tensor, beta1: float,
                           eps: float, step: int, lr: float, state2: Optional[torch.Tensor] = None,
                           beta2: float = 0.0, beta3: float = 0.0, alpha: float = 0.0, weight_decay: float = 0.0,
                           gnorm_scale: float = 1.0, unorm_vec: Optional[torch.Tensor] = None,
                           max_unorm: float = 0.0, skip_zeros: bool = False) -> None:
    """One in-place update of p and its float32 state(s) (bnb.reference.optim defines it). With max_unorm > 0 the
    update's norm is clipped to max_unorm * ||p|| (LAMB / LARS's trust ratio; ||p|| taken here, before the update,
    as bitsandbytes does), through unorm_vec (one float32)."""
    param_norm = 0.0
    if max_unorm > 0.0:
        param_norm = torch.linalg.vector_norm(p.detach().float()).item()
    if isinstance(gnorm_scale, torch.Tensor):
        gnorm_scale = gnorm_scale.item()
    torch.ops.bnb.optimizer_update_32bit(optimizer_name, g, p, state1, state2, unorm_vec, max_unorm, param_norm,
                                         beta1, beta2, beta3, alpha, eps, weight_decay, step, lr, gnorm_scale,
                                         skip_zeros)


def optimizer_update_8bit_blockwise(optimizer_name: str, g: torch.Tensor, p: torch.Tensor, state1: torch.Tensor,
                                    state2: Optional[torch.Tensor], beta1: float, beta2: float, beta3: float,
                                    alpha: float, eps: float, step: int, lr: float, qmap1: torch.Tensor,
                                    qmap2: Optional[torch.Tensor], absmax1: torch.Tensor,
                                    absmax2: Optional[torch.Tensor], weight_decay: float = 0.0,
                                    gnorm_scale: float = 1.0, skip_zeros: bool = False) -> None:
    """One in-place update of p and its 8-bit state(s): uint8 codes into qmap1 / qmap2 (256 values each), scaled by
    absmax1 / absmax2 per block of 256, dequantized, updated and quantized again."""
    if isinstance(gnorm_scale, torch.Tensor):
        gnorm_scale = gnorm_scale.item()
    torch.ops.bnb.optimizer_update_8bit_blockwise(optimizer_name, g, p, state1, state2, beta1, beta2, beta3, alpha,
                                                  eps, step, lr, qmap1, qmap2, absmax1, absmax2, weight_decay,
                                                  gnorm_scale, skip_zeros)


def percentile_clipping(grad: torch.Tensor, gnorm_vec: torch.Tensor, step: int, percentile: int = 5):
    """bitsandbytes' percentile clipping: gnorm_vec (float32 [100]) keeps the squared gradient norms of the last 100
    steps; this step's goes to slot step % 100 (at step 1 it is added to every slot, which starts the history).
    Returns (this step's norm, the clip value: the square root of the `percentile`-th smallest of the 100, and
    gnorm_scale: clip / norm where the norm exceeds the clip, else 1.0, as a float), for the update's gnorm_scale.
    The squared norm is summed in float64 and rounded to float32 (bitsandbytes' kernel sums in float32)."""
    if not isinstance(gnorm_vec, torch.Tensor) or gnorm_vec.dtype != torch.float32 or gnorm_vec.shape != (100,):
        what = (f"a {str(gnorm_vec.dtype).removeprefix('torch.')} tensor of shape {list(gnorm_vec.shape)}"
                if isinstance(gnorm_vec, torch.Tensor) else type(gnorm_vec).__name__)
        raise ValueError(f"percentile_clipping: gnorm_vec must be a float32 tensor of shape [100], got {what}")
    if gnorm_vec.device != grad.device:
        raise ValueError(f"percentile_clipping: gnorm_vec is on {gnorm_vec.device} but grad is on {grad.device}")
    if not isinstance(percentile, int) or isinstance(percentile, bool) or not 0 <= percentile < 100:
        raise ValueError(f"percentile_clipping: percentile must be an int in [0, 100), got {percentile!r}")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ValueError(f"percentile_clipping: step counts from 1, got {step!r}")
    squared = grad.detach().double().square().sum().float()
    slot = step % 100
    gnorm_vec[slot] = 0.0
    if step == 1:
        gnorm_vec += squared
    else:
        gnorm_vec[slot] += squared
    current_gnorm = torch.sqrt(gnorm_vec[slot])
    clip_value = torch.sqrt(torch.sort(gnorm_vec).values[percentile])
    gnorm_scale = (clip_value / current_gnorm).item() if bool(current_gnorm > clip_value) else 1.0
    return current_gnorm, clip_value, gnorm_scale


# bitsandbytes' small helpers beside its ctypes library, for code that calls them.
from ._state_dict import pack_dict_to_tensor, unpack_tensor_to_dict  # noqa: E402  (bitsandbytes re-exports them)

C = 127.0  # the int8 range's bound: row scales (SCB) are absmax, codes round(x * C / absmax)

# Paged tensors in CUDA unified memory (bnb.paged_memory).
from .paged_memory import (  # noqa: E402
    FIRST_CUDA_DEVICE, GlobalPageManager, _mul, elementwise_func, fill, get_paged, prefetch_tensor)


def is_on_gpu(tensors) -> bool:
    """bitsandbytes' device check before a kernel call: True where the tensors (None and paged ones left out) are all
    on the CPU or all on one GPU; RuntimeError listing them otherwise. bnb's ops check this themselves."""
    shown = [t for t in tensors if t is not None]
    devices = {(t.device.type, t.device.index) for t in shown if not getattr(t, "is_paged", False)}
    if len(devices) > 1:
        listed = ", ".join(f"{list(t.shape)} on {t.device}" for t in shown)
        raise RuntimeError(f"is_on_gpu: the tensors must be on one device, got {listed}")
    return True


def get_ptr(A: Optional[torch.Tensor]):
    """The address of A's first element as a ctypes void pointer (None for None), as bitsandbytes passes tensors to
    its C library."""
    import ctypes
    return None if A is None else ctypes.c_void_p(A.data_ptr())


from . import _missing  # noqa: E402

__getattr__ = _missing.install(globals(), __name__)
__all__ += ["pack_dict_to_tensor", "unpack_tensor_to_dict", "C", "FIRST_CUDA_DEVICE", "is_on_gpu", "get_ptr",
            "GlobalPageManager", "get_paged", "prefetch_tensor", "elementwise_func", "fill"]
