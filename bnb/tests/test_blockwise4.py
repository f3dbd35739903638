"""4-bit ops: kernels equal the pure-torch reference bit for bit; published error bounds; gemv; the op contract."""

import copy
import re

import pytest
import torch
from torch.library import opcheck

import bnb
from bnb import functional as F
from bnb.reference import blockwise4 as ref
from helpers import (BLOCKSIZES, FLOAT_DTYPES, assert_same_bits, devices, exactly_nearest_codes, sample,
                     values_around_midpoints)

STORAGES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32]


def test_codebooks_are_bitsandbytes():
    nf4 = F.get_4bit_type("nf4")
    assert nf4[0] == -1.0 and nf4[7] == 0.0 and nf4[15] == 1.0
    assert nf4[8].item() == pytest.approx(0.07958029955625534, abs=0)  # float32 of the published value
    fp4 = F.get_4bit_type("fp4")
    assert fp4.tolist() == (torch.tensor([0, 0.0625, 8, 12, 4, 6, 2, 3, -0.0, -0.0625, -8, -12, -4, -6, -2, -3])
                            / 12).tolist()
    # The codebooks only (quantize_4bit takes nf4 and fp4): symmetric int4 in sevenths, and AbnormalFloat4.
    int4 = torch.tensor([7, 6, 5, 4, 3, 2, 1, 0, -0.0, -1, -2, -3, -4, -5, -6, -7]) / 7
    assert F.get_4bit_type("int4").tolist() == int4.tolist()
    af4 = F.get_4bit_type("af4")
    assert af4[0] == 1.0 and af4[8] == 0.0 and af4[15] == -1.0 and bool((af4[1:] < af4[:-1]).all())
    assert af4[7].item() == pytest.approx(0.04273164) and af4[9].item() == pytest.approx(-0.04934812)
    with pytest.raises(NotImplementedError, match="blocksize 64 only, got 128"):
        F.get_4bit_type("af4", blocksize=128)
    with pytest.raises(NotImplementedError, match="int5"):
        F.get_4bit_type("int5")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_kernel_equals_reference(device, quant_type, dtype, blocksize):
    for n in (1, 2, 31, 3 * blocksize + 17, 20001):
        A = sample(n, dtype, seed=n + blocksize, specials=True).to(device)
        packed, absmax = torch.ops.bnb.quantize_4bit(A, blocksize, quant_type, torch.uint8)
        packed_ref, absmax_ref = ref.quantize_4bit(A.cpu(), blocksize, quant_type, torch.uint8)
        assert_same_bits(packed, packed_ref)
        assert_same_bits(absmax, absmax_ref)
        out = torch.ops.bnb.dequantize_4bit(packed, absmax, blocksize, quant_type, [n], dtype)
        assert_same_bits(out, ref.dequantize_4bit(packed_ref, absmax_ref, blocksize, quant_type, [n], dtype))


@pytest.mark.parametrize("storage", STORAGES)
def test_quant_storage_packing(storage):
    A = torch.randn(64, 64, dtype=torch.bfloat16)
    packed, state = F.quantize_4bit(A, quant_type="nf4", quant_storage=storage)
    assert packed.dtype == storage and packed.shape == (64 * 64 // (2 * packed.element_size()), 1)
    plain, _ = F.quantize_4bit(A, quant_type="nf4")
    assert torch.equal(packed.view(torch.uint8).reshape(-1), plain.reshape(-1))  # same bytes, another dtype
    assert_same_bits(F.dequantize_4bit(packed, state), F.dequantize_4bit(plain, state))


def test_packing_by_hand():
    # NF4 codes: -1 -> 0, 1 -> 15, 0 -> 7; an odd count pads the last low nibble with the code of 0.0, as
    # bitsandbytes' CUDA kernel does (NF4 7, FP4 0).
    A = torch.tensor([-1.0, 1.0, 0.0, 1.0, -1.0])
    packed, absmax = torch.ops.bnb.quantize_4bit(A, 32, "nf4", torch.uint8)
    assert packed.reshape(-1).tolist() == [0x0F, 0x7F, 0x07]
    assert ref.quantize_4bit(A, 32, "nf4", torch.uint8)[0].reshape(-1).tolist() == [0x0F, 0x7F, 0x07]
    packed, _ = torch.ops.bnb.quantize_4bit(torch.tensor([1.0, -1.0, 0.5]), 32, "fp4", torch.uint8)
    assert packed.reshape(-1).tolist() == [0x3B, 0x50]
    assert absmax.tolist() == [1.0]
    # FP4: 0.5 is code 5 (6/12); -0.25 is code 15 (-3/12); a value between two entries goes to the nearer.
    packed, _ = torch.ops.bnb.quantize_4bit(torch.tensor([0.5, -0.25, 1.0, 0.26]), 32, "fp4", torch.uint8)
    assert packed.reshape(-1).tolist() == [0x5F, 0x37]


@pytest.mark.parametrize("quant_type, blocksize, published", [
    ("nf4", 64, 0.0728), ("nf4", 128, 0.0768), ("nf4", 4096, 0.0925), ("fp4", 64, 0.0965)])
def test_error_matches_bitsandbytes_published(quant_type, blocksize, published):
    A = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    packed, state = F.quantize_4bit(A, blocksize=blocksize, quant_type=quant_type)
    err = (F.dequantize_4bit(packed, state) - A).abs().mean().item()
    assert abs(err - published) < 1.5e-3, err


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gemv_matches_dequantize_then_linear(nested, dtype):
    g = torch.Generator().manual_seed(1)
    W = torch.randn(1024, 768, generator=g)
    packed, state = F.quantize_4bit(W.to(dtype), blocksize=64, quant_type="nf4", compress_statistics=nested)
    errs_gemv, errs_linear = [], []
    for _ in range(20):
        x = torch.randn(1, 768, generator=g)
        exact = x @ W.t()
        got = F.gemv_4bit(x.to(dtype), packed, state=state)
        dense = torch.nn.functional.linear(x.to(dtype), F.dequantize_4bit(packed, state))
        assert got.shape == (1, 1024) and got.dtype == dtype
        errs_gemv.append((got.float() - exact).abs().mean())
        errs_linear.append((dense.float() - exact).abs().mean())
    ratio = (sum(errs_gemv) / sum(errs_linear)).item()
    assert 0.995 <= ratio <= 1.005, ratio


@pytest.mark.parametrize("bf16_products", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gemv_error_no_worse_than_dequantize_then_linear(dtype, bf16_products):
    # Against the float64 product of the dequantized weight (float32 code * absmax, as the op defines it): the
    # error of dequantize + F.linear in A's dtype bounds gemv_4bit's. K = 1024 takes the AVX-512 kernels where the
    # CPU has them, the Highway kernel elsewhere (bfloat16 A: their bfloat16-code variants, unless
    # cpu.gemv_bf16_products is off); the exact-code kernels measure 0.25-0.7 of F.linear's error, the bfloat16-code
    # ones ~0.96.
    g = torch.Generator().manual_seed(3)
    W = torch.randn(1536, 1024, generator=g)
    packed, state = F.quantize_4bit(W.to(dtype), blocksize=64, quant_type="nf4")
    W32 = torch.ops.bnb.dequantize_4bit(packed, state.absmax, 64, "nf4", [1536, 1024], torch.float32).double()
    Wdq = F.dequantize_4bit(packed, state)
    err_gemv = err_linear = 0.0
    for _ in range(8):
        x = torch.randn(1, 1024, generator=g).to(dtype)
        exact = x.double() @ W32.t()
        with bnb.config.override(cpu__gemv_bf16_products=bf16_products):
            got = F.gemv_4bit(x, packed, state=state)
            kernel = bnb._C.gemv4_kernel(str(dtype), 1024)
        err_gemv += (got.double() - exact).abs().mean().item()
        err_linear += (torch.nn.functional.linear(x, Wdq).double() - exact).abs().mean().item()
    bf16_codes = kernel in ("avx512bf16", "highway_bf16")
    assert bf16_codes == (dtype == torch.bfloat16 and bf16_products), kernel
    bound = 1.0 if bf16_codes else 0.8
    assert err_gemv <= bound * err_linear, (err_gemv / err_linear, kernel)


@pytest.mark.parametrize("isa", bnb._C.cpu_isas())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gemv_4bit_reads_nested_statistics_as_their_dequantized_absmax(isa, dtype):
    # The CPU kernel expands the nested statistics a band of rows at a time; bit for bit the product with the
    # float32 absmax they dequantize to (F._absmax_of), on every kernel: bands of many rows (K 4096), rows that
    # start mid-block (K not a multiple of the blocksize: bands start every few rows), a block longer than a row,
    # and rows split over threads at any row.
    g = torch.Generator().manual_seed(5)
    for N, K, bs in ((300, 4096, 64), (97, 1000, 128), (33, 777, 64), (130, 4224, 256), (5, 8192, 4096),
                     (2000, 256, 32), (40, 96, 4096)):
        W = torch.randn(N, K, generator=g)
        packed, state = F.quantize_4bit(W.to(dtype), blocksize=bs, quant_type="nf4", compress_statistics=True)
        x = torch.randn(1, K, generator=g).to(dtype)
        nested = (state.absmax, state.state2.code, state.offset)
        for threads in (1, 3):
            with bnb.config.override(cpu__isa=isa, cpu__threads=threads, cpu__grain_elements=1024):
                got = torch.ops.bnb.gemv_4bit(x, packed, [N, K], state.state2.absmax, state.code, bs, *nested)
                want = torch.ops.bnb.gemv_4bit(x, packed, [N, K], F._absmax_of(state), state.code, bs)
                via_functional = F.gemv_4bit(x, packed, state=state)
            assert_same_bits(got, want)
            assert_same_bits(via_functional, want)
    # A bad codebook of the statistics is named, as dequantizing them would name it.
    code = state.state2.code.clone()
    code[3] = float("inf")
    with pytest.raises(RuntimeError, match="absmax_code.*finite"):
        torch.ops.bnb.gemv_4bit(x, packed, [N, K], state.state2.absmax, state.code, bs, state.absmax, code,
                                state.offset)


@pytest.mark.parametrize("isa", bnb._C.cpu_isas())
def test_gemm_4bit_small_batches_on_every_instruction_set(isa):
    # The small-batch kernels through the op (A laid out once, W's rows split over threads, nested statistics
    # expanded per band): within the float64 bound of dequantize + a float32 product, the bias added once; with
    # exact code values (float32 A) the Highway kernel's rows equal gemv_4bit's row by row, bit for bit.
    g = torch.Generator().manual_seed(11)
    N, K = 300, 384
    W = torch.randn(N, K, generator=g)
    packed, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4", compress_statistics=True)
    W32 = F.dequantize_4bit(packed, state).double()
    bias = torch.randn(N, generator=g)
    args = (packed, [N, K], state.state2.absmax, 64, "nf4")
    nested = {"absmax_8bit": state.absmax, "absmax_code": state.state2.code, "absmax_offset": state.offset}
    for M in (2, 17, 40):
        x = torch.randn(M, K, generator=g)
        for dtype in FLOAT_DTYPES:
            xd, bd = x.to(dtype), bias.to(dtype)
            with bnb.config.override(cpu__isa=isa, cpu__threads=3, cpu__grain_elements=1024):
                kernel = bnb._C.gemm4_small_kernel(str(dtype), M, K)
                got = torch.ops.bnb.gemm_4bit(xd, *args, bias=bd, **nested)
                if kernel == "highway" and dtype == torch.float32:
                    rows = [torch.ops.bnb.gemv_4bit(r.view(1, K), packed, [N, K], F._absmax_of(state), state.code,
                                                    64) for r in xd]
                    assert_same_bits(torch.ops.bnb.gemm_4bit(xd, *args, **nested), torch.cat(rows))
            assert kernel == ("none" if isa == "scalar" or M > 32 and isa.startswith("avx3") else
                              "highway" if not isa.startswith("avx3") else kernel), (isa, M, kernel)
            exact = xd.double() @ W32.t() + bd.double()
            magnitude = xd.double().abs() @ W32.abs().t() + bd.double().abs()
            rounding = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]
            weight = 2.0**-8 if kernel == "avx512bf16" or kernel == "none" and dtype == torch.bfloat16 else 0.0
            if kernel == "none":  # torch's own product: where it sums in its dtype (float16 on AVX512-FP16), its error
                dense = torch.nn.functional.linear(xd, W32.to(dtype), bd).double()
                weight += 2 * float(((dense - exact).abs() / magnitude).max())
            bound = (64 * 2.0**-24 + weight) * magnitude + rounding * exact.abs()
            assert bool(((got.double() - exact).abs() <= bound).all()), (isa, M, dtype, kernel)


@pytest.mark.parametrize("isa", sorted({"best", "avx2"} & ({"best"} | set(bnb._C.cpu_isas()))))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gemm_4bit_beyond_small_batches_is_dequantize_then_linear_over_several_bands(dtype, isa):
    # More rows than the small-batch kernel takes: the CPU dequantizes 16 MB bands of the weight (3000 x 4000 rows
    # is 2-3 bands, rows starting mid-block with blocksize 256) and multiplies each by addmm, bit for bit
    # dequantize + F.linear of the whole: in A's dtype where the CPU has instructions for its products, else (16-bit
    # A without AVX512-BF16 / -FP16, or a cap below avx3) in float32, rounded once to A's dtype.
    g = torch.Generator().manual_seed(7)
    W = torch.randn(3000, 4000, generator=g)
    packed, state = F.quantize_4bit(W.to(dtype), blocksize=256, quant_type="nf4", compress_statistics=True)
    bias = torch.randn(3000, generator=g).to(dtype)
    x = torch.randn(2, 20, 4000, generator=g).to(dtype)
    with torch.no_grad(), bnb.config.override(cpu__isa=isa):
        native = bnb._C.cpu_native_products(str(dtype))
        got = bnb.matmul_4bit(x, packed.t(), state, bias=bias)
    state32 = copy.copy(state)
    state32.dtype = torch.float32
    with torch.no_grad():
        if native:
            want = torch.nn.functional.linear(x, F.dequantize_4bit(packed, state), bias)
        else:
            want = torch.nn.functional.linear(x.float(), F.dequantize_4bit(packed, state32), bias.float()).to(dtype)
    if dtype != torch.float16:  # float16's instructions (AVX512-FP16) are rarer: either way, as the CPU has them
        assert native == (dtype == torch.float32 or isa == "best" and F.has_avx512bf16()), (dtype, isa)
    assert_same_bits(got, want)


def test_gemv_kernel_close_to_reference_and_handles_ragged_blocks():
    # K not a multiple of the blocksize: blocks run across row ends.
    W = torch.randn(37, 100)
    packed, state = F.quantize_4bit(W, blocksize=32, quant_type="fp4")
    x = torch.randn(1, 1, 100)
    got = torch.ops.bnb.gemv_4bit(x, packed, [37, 100], state.absmax, state.code, 32)
    want = ref.gemv_4bit(x, packed, [37, 100], state.absmax, state.code, 32)
    assert got.shape == (1, 1, 37)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nested", [False, True])
def test_gemm_4bit(nested):
    W = torch.randn(64, 96)
    packed, state = F.quantize_4bit(W, blocksize=32, quant_type="nf4", compress_statistics=nested)
    A, bias = torch.randn(5, 96), torch.randn(64)
    if nested:
        args = (state.state2.absmax, 32, "nf4", bias, state.absmax, state.state2.code, state.offset)
    else:
        args = (state.absmax, 32, "nf4", bias)
    got = torch.ops.bnb.gemm_4bit(A, packed, [64, 96], *args)
    want = torch.nn.functional.linear(A, F.dequantize_4bit(packed, state), bias)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got, ref.gemm_4bit(A, packed, [64, 96], *args))


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    A = torch.randn(64, 96, device=device, dtype=torch.bfloat16)
    opcheck(torch.ops.bnb.quantize_4bit.default, (A, 64, "nf4", torch.uint8))
    # Packed codes viewed as float16 can spell NaN, which opcheck's comparison rejects; zeros pack to 0x77.
    opcheck(torch.ops.bnb.quantize_4bit.default, (torch.zeros_like(A), 64, "fp4", torch.float16))
    packed, absmax = torch.ops.bnb.quantize_4bit(A, 64, "nf4", torch.uint8)
    opcheck(torch.ops.bnb.dequantize_4bit.default, (packed, absmax, 64, "nf4", [64, 96], torch.bfloat16))
    out = torch.empty(64, 96, device=device, dtype=torch.bfloat16)
    opcheck(torch.ops.bnb.dequantize_4bit.out, (packed, absmax, 64, "nf4", [64, 96], torch.bfloat16), {"out": out})
    code = F.get_4bit_type("nf4", device=device)
    x = torch.randn(1, 96, device=device, dtype=torch.bfloat16)
    opcheck(torch.ops.bnb.gemv_4bit.default, (x, packed, [64, 96], absmax, code, 64))
    y = torch.empty(1, 64, device=device, dtype=torch.bfloat16)
    opcheck(torch.ops.bnb.gemv_4bit.out, (x, packed, [64, 96], absmax, code, 64), {"out": y})
    opcheck(torch.ops.bnb.gemm_4bit.default, (torch.randn(3, 96, device=device, dtype=torch.bfloat16), packed,
                                               [64, 96], absmax, 64, "nf4"))
    # With inputs that require grad, opcheck checks the registered gradients too.
    opcheck(torch.ops.bnb.gemv_4bit.default, (x.float().requires_grad_(), packed, [64, 96], absmax, code, 64))
    opcheck(torch.ops.bnb.gemm_4bit.default, (torch.randn(3, 96, device=device, requires_grad=True), packed,
                                               [64, 96], absmax, 64, "nf4"),
            {"bias": torch.randn(64, device=device, requires_grad=True)})


W32 = torch.randn(64, 64)
P, AM = torch.ops.bnb.quantize_4bit(W32, 64, "nf4", torch.uint8)
CODE = F.get_4bit_type("nf4")


@pytest.mark.parametrize("call, message", [
    (lambda: torch.ops.bnb.quantize_4bit(W32, 64, "nf5", torch.uint8),
     "quant_type must be 'nf4' or 'fp4', got 'nf5'"),
    (lambda: torch.ops.bnb.quantize_4bit(W32, 48, "nf4", torch.uint8), "blocksize must be a power of two"),
    (lambda: torch.ops.bnb.quantize_4bit(W32.int(), 64, "nf4", torch.uint8), "A must be float32, float16 or "
                                                                             "bfloat16, got int32"),
    (lambda: torch.ops.bnb.quantize_4bit(torch.randn(6), 64, "nf4", torch.float32),
     "6 values pack into 3 bytes, not a whole number of float32"),
    (lambda: torch.ops.bnb.dequantize_4bit(P, AM[:3], 64, "nf4", [64, 64], torch.float32),
     "absmax must hold 64 values (one per block), got 3"),
    (lambda: torch.ops.bnb.dequantize_4bit(P, AM, 64, "nf4", [64, 65], torch.float32),
     "A holds 2048 bytes of packed codes; 4160 values need 2080"),
    (lambda: torch.ops.bnb.dequantize_4bit(P, AM, 64, "nf4", [64, 64], torch.int32), "dtype must be float32"),
    (lambda: torch.ops.bnb.gemv_4bit(torch.randn(2, 64), P, [64, 64], AM, CODE, 64), "A must be a single row"),
    (lambda: torch.ops.bnb.gemv_4bit(torch.randn(64), P, [64, 64], AM, CODE, 64).sum()
     and torch.ops.bnb.gemv_4bit(torch.randn(1, 63), P, [64, 64], AM, CODE, 64), "A has 63 columns"),
    (lambda: torch.ops.bnb.gemv_4bit(torch.randn(1, 64), P, [64, 64], AM, CODE[:8], 64),
     "code must hold 16 values"),
    (lambda: torch.ops.bnb.gemv_4bit(torch.randn(1, 64), P, [64], AM, CODE, 64), "shapeB must be [N, K]"),
    # Sizes whose product wraps past 2^64 to 0 would pass with empty B and absmax (a wide A by a stride-0 view).
    (lambda: torch.ops.bnb.gemv_4bit(torch.zeros(1, 1).expand(1, 2**32), P[:0], [2**32, 2**32], AM[:0], CODE, 64),
     "shapeB [4294967296, 4294967296] has more than 2^63 elements"),
    (lambda: torch.ops.bnb.gemm_4bit(torch.zeros(1, 1).expand(1, 2**32), P[:0], [2**32, 2**32], AM[:0], 64, "nf4"),
     "shapeB [4294967296, 4294967296] has more than 2^63 elements"),
    (lambda: torch.ops.bnb.dequantize_4bit(P[:0], AM[:0], 64, "nf4", [2**32, 2**32], torch.float32),
     "shape [4294967296, 4294967296] has more than 2^63 elements"),
    (lambda: torch.ops.bnb.dequantize_4bit(P, AM, 64, "nf4", [-64, -64], torch.float32),
     "shape [-64, -64] has a negative size"),
])
def test_bad_input_gives_a_clear_error(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


def test_functional_argument_errors():
    with pytest.raises(ValueError, match="invalid blocksize 48"):
        F.quantize_4bit(W32, blocksize=48)
    with pytest.raises(ValueError, match="quant_type must be 'nf4' or 'fp4'"):
        F.quantize_4bit(W32, quant_type="int4")
    with pytest.raises(ValueError, match="requires both absmax and out"):
        F.dequantize_4bit(P, absmax=AM)
    with pytest.raises(ValueError, match="state cannot be None"):
        F.gemv_4bit(torch.randn(1, 64), P)


@pytest.mark.parametrize("nested", [False, True])
def test_packed_state_dict_round_trip(nested):
    packed, state = F.quantize_4bit(torch.randn(32, 64), quant_type="fp4", compress_statistics=nested)
    d = state.as_dict(packed=True)
    assert "quant_state.bitsandbytes__fp4" in d and all(isinstance(v, torch.Tensor) for v in d.values())
    again = F.QuantState.from_dict(d, device="cpu")
    assert again == state and again.shape == torch.Size([32, 64]) and again.quant_type == "fp4"
    assert_same_bits(F.dequantize_4bit(packed, again), F.dequantize_4bit(packed, state))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_codes_are_exactly_nearest_around_every_midpoint(device, quant_type):
    # Blocks of 64 that each start with 1.0 (absmax 1: each value is its own scaled value), then 63 test values.
    code = ref.code4(quant_type, "cpu").tolist()
    v = values_around_midpoints(code)
    v += [0.0] * (-len(v) % 63)
    rows = [[1.0] + v[k:k + 63] for k in range(0, len(v), 63)]
    A = torch.tensor(rows, device=device).reshape(-1)
    packed, absmax = torch.ops.bnb.quantize_4bit(A, 64, quant_type, torch.uint8)
    assert absmax.tolist() == [1.0] * len(rows)
    nibbles = torch.stack([packed.reshape(-1) >> 4, packed.reshape(-1) & 15], dim=1).reshape(len(rows), 64)
    assert nibbles[:, 1:].reshape(-1).tolist() == exactly_nearest_codes(v, code)



@pytest.mark.parametrize("isa", bnb._C.cpu_isas())
def test_gemv_4bit_rows_with_infinite_absmax_give_nan_like_the_dense_product(isa):
    W = torch.randn(4, 64)
    W[0, 0::2], W[0, 1::2] = float("inf"), -float("inf")  # +inf and -inf weights meet: NaN
    W[1, 5] = float("inf")  # inf absmax: the other weights dequantize to NaN (README's special values)
    packed, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4")
    A = torch.ones(1, 64)
    A[0, 0::2] = 3.0
    dense = A @ F.dequantize_4bit(packed, state).t()
    with bnb.config.override(cpu__isa=isa):
        got = F.gemv_4bit(A, packed, state=state)
    assert torch.isnan(dense[0, :2]).all() and torch.isnan(got[0, :2]).all(), (isa, got)
    assert torch.allclose(got[0, 2:], dense[0, 2:], rtol=1e-5, atol=1e-5)


def dense_grads(A, W, bias=None):
    """A's (and bias') gradients of sum(linear(A, W, bias) * G) for a fixed G, through plain torch."""
    A = A.detach().clone().requires_grad_()
    b = None if bias is None else bias.detach().clone().requires_grad_()
    y = torch.nn.functional.linear(A, W, b)
    G = torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(y.dtype)
    (y * G).sum().backward()
    return G, A.grad, None if b is None else b.grad


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gemv_4bit_gives_A_its_gradient(dtype):
    W = torch.randn(48, 96)
    packed, state = F.quantize_4bit(W, blocksize=32, quant_type="fp4")
    A = torch.randn(1, 96, dtype=dtype, requires_grad=True)
    y = F.gemv_4bit(A, packed, state=state)
    G, want, _ = dense_grads(A.float(), F.dequantize_4bit(packed, state).float())
    (y * G.to(dtype)).sum().backward()
    assert A.grad is not None and A.grad.dtype == dtype
    torch.testing.assert_close(A.grad.float(), want, **({} if dtype == torch.float32 else {"rtol": 2e-2,
                                                                                           "atol": 2e-2}))


def test_gemv_4bit_gradient_takes_2d_code_and_absmax_as_the_op_does():
    W = torch.randn(48, 96)
    packed, state = F.quantize_4bit(W, blocksize=32, quant_type="fp4")
    grads = []
    for code, absmax in ((state.code, state.absmax), (state.code.view(1, 16), state.absmax.view(-1, 1))):
        A = torch.ones(1, 96, requires_grad=True)
        torch.ops.bnb.gemv_4bit(A, packed, [48, 96], absmax, code, 32).sum().backward()
        grads.append(A.grad)
    assert_same_bits(grads[1], grads[0])


@pytest.mark.parametrize("nested", [False, True])
def test_gemm_4bit_gives_A_and_bias_their_gradients(nested):
    W = torch.randn(64, 96)
    packed, state = F.quantize_4bit(W, blocksize=32, quant_type="nf4", compress_statistics=nested)
    A = torch.randn(2, 5, 96, requires_grad=True)
    bias = torch.randn(64, requires_grad=True)
    if nested:
        args = (state.state2.absmax, 32, "nf4", bias, state.absmax, state.state2.code, state.offset)
    else:
        args = (state.absmax, 32, "nf4", bias)
    y = torch.ops.bnb.gemm_4bit(A, packed, [64, 96], *args)
    G, want_A, want_bias = dense_grads(A, F.dequantize_4bit(packed, state), bias)
    (y * G).sum().backward()
    torch.testing.assert_close(A.grad, want_A)
    torch.testing.assert_close(bias.grad, want_bias)


def test_gemm_4bit_gradient_takes_every_offset_the_forward_takes():
    # The op takes absmax_offset as any one value (the kernels add it in float32); the backward added a [1, 1]
    # float64 offset as it was, and its float64 absmax was then refused.
    W = torch.randn(64, 96)
    packed, state = F.quantize_4bit(W, blocksize=32, quant_type="nf4", compress_statistics=True)
    want = None
    for offset in (state.offset, state.offset.view(1, 1).double()):
        A = torch.randn(5, 96, generator=torch.Generator().manual_seed(0), requires_grad=True)
        y = torch.ops.bnb.gemm_4bit(A, packed, [64, 96], state.state2.absmax, 32, "nf4", None, state.absmax,
                                    state.state2.code, offset)
        y.sum().backward()
        want = A.grad if want is None else want
        assert_same_bits(A.grad, want)


def test_quantize_4bit_checks_out_and_absmax_before_writing():
    A = torch.randn(10, 64)  # 640 values: 320 packed bytes, 10 blocks of 64
    u8, f32 = torch.uint8, torch.float32
    cases = [  # (out, absmax, compress_statistics, message)
        ((319, 1), u8, (10,), f32, False, r"out must be torch.uint8 of shape \(320, 1\) for A of shape \(10, 64\) "
                                          r"\(blocksize 64, compress_statistics=False\), got torch.uint8 of shape "
                                          r"\(319, 1\)"),
        ((320, 1), torch.float16, (10,), f32, False, r"out must be torch.uint8 .* got torch.float16"),
        ((320,), u8, (10,), f32, False, r"out must be torch.uint8 of shape \(320, 1\).* got torch.uint8 of shape "
                                        r"\(320,\)"),
        ((320, 1), u8, (9,), f32, False, r"absmax must be torch.float32 of shape \(10,\).* got torch.float32 of "
                                         r"shape \(9,\)"),
        ((320, 1), u8, (10,), f32, True, r"absmax must be torch.uint8 of shape \(10,\)"),
    ]
    for out_shape, out_dtype, absmax_shape, absmax_dtype, nested, message in cases:
        out, absmax = torch.zeros(out_shape, dtype=out_dtype), torch.zeros(absmax_shape, dtype=absmax_dtype)
        with pytest.raises(ValueError, match=message):
            F.quantize_4bit(A, out=out, absmax=absmax, compress_statistics=nested)
        assert not out.any() and not absmax.any()  # neither the wrong buffer nor the right one was written
    out, absmax = torch.zeros(320, 1, dtype=u8), torch.zeros(10, requires_grad=True)
    with pytest.raises(RuntimeError, match="absmax requires grad"):
        F.quantize_4bit(A, out=out, absmax=absmax)
    assert not out.any() and not absmax.detach().any()
    for nested in (False, True):
        out = torch.zeros(320, 1, dtype=u8)
        absmax = torch.zeros(10, dtype=u8 if nested else f32)
        packed, state = F.quantize_4bit(A, out=out, absmax=absmax, compress_statistics=nested)
        want_packed, want_state = F.quantize_4bit(A, compress_statistics=nested)
        assert packed is out and state.absmax is absmax
        assert_same_bits(out, want_packed)
        assert_same_bits(absmax, want_state.absmax)


def test_matmul_4bit_takes_a_kn_weight_with_a_deprecation_warning():
    W = torch.randn(96, 40)  # [K, N]: in_features first, as bitsandbytes still accepts
    packed, state = F.quantize_4bit(W, quant_type="nf4")
    A = torch.randn(3, 96, requires_grad=True)
    # It says what to do, in bitsandbytes' words (its tests match "Re-quantize from the weight").
    with pytest.warns(DeprecationWarning, match=r"quantized from a \[K, N\] tensor \(quant_state.shape=\[96, 40\].*"
                                                r"Re-quantize from the weight in \[N, K\] \(out_features, "
                                                r"in_features\)"):
        y = bnb.matmul_4bit(A, packed, state)
    Wq = F.dequantize_4bit(packed, state)
    G, want, _ = dense_grads(A, Wq.t())
    torch.testing.assert_close(y, A.detach() @ Wq)
    (y * G).sum().backward()
    torch.testing.assert_close(A.grad, want)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64])
def test_matmul_4bit_refuses_activations_that_are_not_floats(dtype):
    # They gave an integer product of truncated weights; Linear4bit refuses them the same way.
    packed, state = F.quantize_4bit(torch.randn(8, 16), quant_type="nf4")
    for rows in (3, 1):
        A = torch.ones(rows, 16).to(dtype)
        with pytest.raises(RuntimeError, match=f"matmul_4bit: A must be a floating-point tensor, got "
                                               f"{str(dtype).removeprefix('torch.')}"):
            bnb.matmul_4bit(A, packed, state)


def test_matmul_4bit_needs_a_2d_state_shape():
    packed, state = F.quantize_4bit(torch.randn(4, 8, 16), quant_type="nf4")
    with pytest.raises(ValueError, match=r"quant_state.shape must be 2D \[N, K\], got \[4, 8, 16\]"):
        bnb.matmul_4bit(torch.randn(2, 16), packed, state)


def test_compiled_gemv_4bit_gradient_equals_eager_with_a_partial_last_block():
    # 3 x 33 = 99 values: the last of two blocks is partial. Inductor once miscompiled the reference dequantize the
    # backward uses (repeat_interleave(...)[:n]), giving gradients off by 1e20.
    packed, state = F.quantize_4bit(torch.randn(3, 33), blocksize=64, quant_type="nf4")

    def loss(a):
        return torch.ops.bnb.gemv_4bit(a, packed, [3, 33], state.absmax, state.code, 64).sum()

    a = torch.randn(1, 33, requires_grad=True)
    want, = torch.autograd.grad(loss(a), a)
    got, = torch.autograd.grad(torch.compile(loss, fullgraph=True)(a), a)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(want, torch.ones(1, 3) @ F.dequantize_4bit(packed, state))


def test_quantize_and_dequantize_outputs_do_not_require_grad():
    W = torch.randn(8, 64, requires_grad=True)
    packed, absmax = torch.ops.bnb.quantize_4bit(W, 64, "nf4", torch.uint8)
    q8, absmax8 = torch.ops.bnb.quantize_blockwise(W, F.create_dynamic_map(), 64)
    assert not absmax.requires_grad and not absmax8.requires_grad
    am = absmax.clone().requires_grad_()
    assert not torch.ops.bnb.dequantize_4bit(packed, am, 64, "nf4", [8, 64], torch.float32).requires_grad
    assert not torch.ops.bnb.dequantize_blockwise(q8, absmax8.clone().requires_grad_(), F.create_dynamic_map(), 64,
                                                  torch.float32).requires_grad
    # opcheck's autograd checks pass with grad-requiring inputs (they failed in aot_dispatch before).
    opcheck(torch.ops.bnb.quantize_4bit.default, (W, 64, "nf4", torch.uint8))
    opcheck(torch.ops.bnb.dequantize_4bit.default, (packed, am, 64, "nf4", [8, 64], torch.float32))


def test_gemm_4bit_argument_errors():
    packed, state = F.quantize_4bit(torch.randn(64, 96), blocksize=32, quant_type="nf4", compress_statistics=True)
    A = torch.randn(3, 96)
    nested = (state.state2.absmax, 32, "nf4")
    for fn in (torch.ops.bnb.gemm_4bit, ref.gemm_4bit):
        with pytest.raises(RuntimeError, match="bias must be (torch.)?float32, got (torch.)?int64"):
            fn(A, packed, [64, 96], *nested, torch.arange(64), state.absmax, state.state2.code, state.offset)
        with pytest.raises(RuntimeError, match="absmax_code and absmax_offset describe nested statistics and go "
                                               "with absmax_8bit, which is missing"):
            fn(A, packed, [64, 96], torch.ones(192), 32, "nf4", None, None, state.state2.code, state.offset)
    bad_code = state.state2.code.clone()
    bad_code[0] = float("nan")
    with pytest.raises(RuntimeError, match="absmax_code: .*nan"):
        torch.ops.bnb.gemm_4bit(A, packed, [64, 96], *nested, None, state.absmax, bad_code, state.offset)
    with pytest.raises(RuntimeError, match=r"has more than 2\^63 elements"):
        torch.ops.bnb.dequantize_4bit(P, AM, 64, "nf4", [2**32, 2**32], torch.float32)


@pytest.mark.parametrize("storage", [torch.uint8, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_4bit_into_writes_what_quantize_4bit_returns(storage, quant_type, dtype):
    A = torch.randn(48, 100, generator=torch.Generator().manual_seed(4)).to(dtype)  # 4800 values, blocksize 128
    want_packed, want_absmax = torch.ops.bnb.quantize_4bit(A, 128, quant_type, storage)
    out, absmax = torch.full_like(want_packed, 7), torch.full_like(want_absmax, 7)
    torch.ops.bnb.quantize_4bit_into(A, 128, quant_type, out, absmax)
    assert_same_bits(out, want_packed)
    assert_same_bits(absmax, want_absmax)
    ref_out, ref_absmax = torch.zeros_like(out), torch.zeros_like(absmax)
    ref.quantize_4bit_into(A, 128, quant_type, ref_out, ref_absmax)
    assert_same_bits(ref_out, want_packed)
    # A strided out and absmax (columns of wider tensors) receive the same values.
    wide, wide_absmax = torch.zeros(out.shape[0], 3, dtype=storage), torch.zeros(absmax.numel(), 2)
    torch.ops.bnb.quantize_4bit_into(A, 128, quant_type, wide[:, 1:2], wide_absmax[:, 0])
    assert_same_bits(wide[:, 1:2], want_packed)
    assert_same_bits(wide_absmax[:, 0], want_absmax)
    assert not wide[:, 0].any() and not wide[:, 2].any() and not wide_absmax[:, 1].any()


def test_quantize_4bit_into_names_bad_outputs():
    A = torch.randn(640)
    cases = [
        (torch.empty(319, 1, dtype=torch.uint8), torch.empty(10), r"quantize_4bit_into: out.*\[320, 1\]"),
        (torch.empty(160, 1, dtype=torch.int16), torch.empty(10), r"quantize_4bit_into: out's dtype must be uint8"),
        (torch.empty(320, 1, dtype=torch.uint8), torch.empty(9), r"quantize_4bit_into: absmax.*10"),
        (torch.empty(320, 1, dtype=torch.uint8), torch.empty(10, dtype=torch.float64), r"absmax.*float32"),
    ]
    for out, absmax, message in cases:
        with pytest.raises(RuntimeError, match=message):
            torch.ops.bnb.quantize_4bit_into(A, 64, "nf4", out, absmax)
        with pytest.raises(RuntimeError, match=message.replace("quantize_4bit_into: ", "")):
            ref.quantize_4bit_into(A, 64, "nf4", out, absmax)
    shared = torch.zeros(400, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="out and absmax share memory"):
        torch.ops.bnb.quantize_4bit_into(A, 64, "nf4", shared[:320].view(320, 1), shared[300:340].view(torch.float32))
    assert not shared.any()
    with pytest.raises(RuntimeError, match="out and absmax share memory"):
        ref.quantize_4bit_into(A, 64, "nf4", shared[:320].view(320, 1), shared[300:340].view(torch.float32))
    # Meta: the checks only.
    torch.ops.bnb.quantize_4bit_into(A.to("meta"), 64, "nf4", torch.empty(320, 1, dtype=torch.uint8, device="meta"),
                                     torch.empty(10, device="meta"))
