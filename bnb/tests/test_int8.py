"""LLM.int8() ops: every kernel equals the pure-torch definition bit for bit on every device; hand-checked codes;
bitsandbytes' error bounds for the int8 product; bad input is a clear error."""

import re

import pytest
import torch

from bnb.reference import int8 as ref
from helpers import FLOAT_DTYPES, assert_same_bits, devices

ops = torch.ops.bnb


def data(shape, dtype, seed=0, specials=False):
    """randn * 3 (|x| >= 6 now and then: outliers at threshold 6); with specials a zero row, a row whose only
    nonzero is an outlier, NaN and +-inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * 3
    if specials:
        rows = x.view(-1, shape[-1])
        rows[1] = 0
        rows[2] = 0
        rows[2, 0] = 50
        rows[3, shape[-1] // 2] = float("nan")
        rows[4, 0], rows[4, -1] = float("inf"), float("-inf")
    return x.to(dtype)


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert_same_bits(g, w)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("threshold", [0.0, 6.0, 1.5])
@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (2, 5, 96), (300,), (64, 1000)])
def test_quantize_ops_equal_the_definition(device, dtype, threshold, shape, specials=True):
    A = data(shape, dtype, seed=len(shape), specials=len(shape) > 1 and shape[-2] > 4).to(device)
    assert_same(ops.int8_vectorwise_quant(A, threshold), ref.int8_vectorwise_quant(A.cpu(), threshold))
    assert_same(ops.int8_double_quant(A, threshold), ref.int8_double_quant(A.cpu(), threshold))
    codes, stats, _ = ref.int8_vectorwise_quant(A.cpu(), threshold)
    assert_same_bits(ops.int8_vectorwise_dequant(codes.to(device), stats.to(device)),
                     ref.int8_vectorwise_dequant(codes, stats))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (5, 33, 7), (17, 64, 48), (40, 4096, 24)])
def test_int8_product_is_exact(device, M, K, N):
    g = torch.Generator().manual_seed(M + K)
    A = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    B = torch.randint(-128, 128, (N, K), generator=g, dtype=torch.int8)
    A[0] = B[0] = -128  # the largest products
    want = (A.long() @ B.long().t()).int()
    assert_same_bits(ops.int8_linear_matmul(A.to(device), B.to(device)), want)
    out = torch.empty(M, N, dtype=torch.int32, device=device)
    ops.int8_linear_matmul.out(A.to(device), B.to(device), out=out)
    assert_same_bits(out, want)
    assert_same_bits(ops.int8_linear_matmul(A.view(1, M, K).to(device), B.to(device)), want.view(1, M, N))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("K", [1, 1025, 20000, 131071])
def test_reference_int8_product_is_exact_on_every_device(device, K):
    # The definition sums float32 products over slices of 1024 (CUDA has no int64 matmul): exact only while a slice's
    # partial sums stay within 2^24, which -128 * -128 * 1024 reaches; 127 * 127 is odd: one float32 matmul over
    # K = 20000 rounds (seen on the CPU).
    A = torch.full((3, K), -128, dtype=torch.int8)
    B = torch.full((2, K), -128, dtype=torch.int8)
    A[1] = B[1] = 127
    A[2] = torch.randint(-128, 128, (K,), generator=torch.Generator().manual_seed(K), dtype=torch.int8)
    want = (A.long() @ B.long().t()).int()
    assert_same_bits(ref.int8_linear_matmul(A.to(device), B.to(device)).cpu(), want)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [None, *FLOAT_DTYPES])
@pytest.mark.parametrize("bias_dtype", [None, torch.float16, torch.float32])
def test_epilogues_equal_the_definition(device, dtype, bias_dtype):
    g = torch.Generator().manual_seed(1)
    A = torch.randint(-127, 128, (9, 200), generator=g, dtype=torch.int8)
    B = torch.randint(-127, 128, (70, 200), generator=g, dtype=torch.int8)
    rs, cs = torch.rand(9, generator=g) * 5, torch.rand(70, generator=g) * 5
    cs[3] = float("inf")
    bias = None if bias_dtype is None else torch.randn(70, generator=g).to(bias_dtype)
    C = ref.int8_linear_matmul(A, B)
    on = [t.to(device) if t is not None else None for t in (A, B, C, rs, cs, bias)]
    assert_same_bits(ops.int8_mm_dequant(on[2], on[3], on[4], dtype, on[5]), ref.int8_mm_dequant(C, rs, cs, dtype, bias))
    assert_same_bits(ops.int8_scaled_mm(on[0], on[1], on[3], on[4], on[5], dtype),
                     ref.int8_scaled_mm(A, B, rs, cs, bias, dtype))
    assert ref.int8_mm_dequant(C, rs, cs, dtype, bias).dtype == (dtype or torch.float16)  # bitsandbytes' default


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("M, K, N", [(1, 4096, 64), (1, 16, 7), (3, 528, 33), (4, 64, 5), (5, 1040, 9), (16, 512, 40),
                                     (17, 64, 8)])
@pytest.mark.parametrize("dtype, bias_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float16, None),
                                               (torch.float32, torch.float16)])
def test_small_batch_products_equal_the_definition(device, M, K, N, dtype, bias_dtype):
    # Up to 16 rows with K a multiple of 16 take CUDA's one-pass product (int8_scaled_gemv), 17 its GEMM; the CPU's
    # own split. Codes of -128 and 127 make the largest sums; a second A starts 1 byte into its storage (misaligned
    # for 16-byte loads, so CUDA takes the GEMM): the same values either way.
    g = torch.Generator().manual_seed(M * N + K)
    A = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    B = torch.randint(-128, 128, (N, K), generator=g, dtype=torch.int8)
    A[0] = B[0] = -128
    B[-1] = 127
    rs, cs = torch.rand(M, generator=g) * 5, torch.rand(N, generator=g) * 5
    bias = None if bias_dtype is None else torch.randn(N, generator=g).to(bias_dtype)
    want = ref.int8_scaled_mm(A, B, rs, cs, bias, dtype)
    on = [t.to(device) if t is not None else None for t in (A, B, rs, cs, bias)]
    assert_same_bits(ops.int8_scaled_mm(*on[:4], on[4], dtype), want)
    shifted = torch.empty(M * K + 1, dtype=torch.int8, device=device)[1:].view(M, K).copy_(on[0])
    assert_same_bits(ops.int8_scaled_mm(shifted, *on[1:4], on[4], dtype), want)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("threshold", [0.0, 6.0, 100.0])
def test_mixed_product_equals_the_definition(device, dtype, threshold):
    A = data((3, 6, 128), dtype, seed=3).to(device)
    W = data((96, 128), dtype, seed=4).to(device)
    CA, SCA, cols = ops.int8_vectorwise_quant(A, threshold)
    CB, SCB, _ = ops.int8_vectorwise_quant(W, 0.0)
    bias = torch.randn(96).to(device, dtype)
    got = ops.int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, cols, bias)
    # The definition on the same device: the outlier columns' addmm is torch's, whose rounding differs by device (an
    # H100's float16 addmm differed from the CPU's in the last bit of 2 of 1728 values).
    want = ref.int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, cols, bias)
    assert_same(got, want)
    # Its int8 part against the CPU's definition, device to device.
    cpu = [t.cpu() if t is not None else None for t in (CA, CB, SCA, SCB, bias)]
    assert_same_bits(ops.int8_scaled_mm(CA, CB, SCA, SCB, bias, dtype).cpu(),
                     ref.int8_scaled_mm(*cpu[:4], cpu[4], dtype))
    assert got[0].shape == (3, 6, 96) and got[1].shape == (18, 0 if cols is None else cols.numel())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("N", [1000, 4096])
def test_one_token_mixed_product_equals_the_definition(device, N):
    # A decode step's shape: the product split over tasks (N = 1000: off the 16-column task grain), the outlier
    # columns gathered from a large weight; CUDA takes its one-pass product and its column kernel.
    x = data((1, 4096), torch.bfloat16, seed=7)
    x[0, [10, 400, 2000, 4095]] = torch.tensor([50.0, -40.0, 30.0, 20.0], dtype=torch.bfloat16)
    W = data((N, 4096), torch.bfloat16, seed=8)
    CB, SCB, _ = ops.int8_vectorwise_quant(W.to(device), 0.0)
    CA, SCA, cols = ops.int8_vectorwise_quant(x.to(device), 6.0)
    assert cols.numel() >= 4
    bias = torch.randn(N, generator=torch.Generator().manual_seed(N)).to(device, torch.bfloat16)
    got = ops.int8_mixed_scaled_mm(x.to(device), CA, CB, SCA, SCB, cols, bias)
    assert_same(got, ref.int8_mixed_scaled_mm(x.to(device), CA, CB, SCA, SCB, cols, bias))


def test_codes_by_hand():
    A = torch.tensor([[127.0, 2.5, -3.5, 0.5], [1.0, -2.0, 8.0, 0.0]])
    codes, stats, cols = ops.int8_vectorwise_quant(A, 6.0)
    # Row 0: 127 is an outlier; absmax 3.5, scale 36.285713: 2.5 -> 90.71 -> 91, -3.5 -> -127, 0.5 -> 18.14 -> 18.
    # Row 1: 8 is an outlier; absmax 2, scale 63.5: 1 -> 63.5 -> 64 (half to even), -2 -> -127. Outlier columns 0, 2.
    assert cols.tolist() == [0, 2]
    assert stats.tolist() == [3.5, 2.0]
    assert codes.tolist() == [[0, 91, 0, 18], [0, -127, 0, 0]]
    # Without a threshold the absmax is the largest magnitude and nothing is zeroed.
    codes, stats, cols = ops.int8_vectorwise_quant(A, 0.0)
    assert cols is None and stats.tolist() == [127.0, 8.0] and codes[0].tolist() == [127, 2, -4, 0]
    back = ops.int8_vectorwise_dequant(codes, stats)
    assert back[0, 0].item() == pytest.approx(127.0) and back.dtype == torch.float32


@pytest.mark.parametrize("device", devices())
def test_empty_last_dimensions_are_handled(device):
    # A weight with no outlier columns is dequantized over zero columns inside int8_mixed_scaled_mm.
    codes = torch.empty(4, 0, dtype=torch.int8, device=device)
    assert_same_bits(ops.int8_vectorwise_dequant(codes, torch.ones(4, device=device)),
                     ref.int8_vectorwise_dequant(codes.cpu(), torch.ones(4)))
    C = torch.empty(3, 0, dtype=torch.int32, device=device)
    assert ops.int8_mm_dequant(C, torch.ones(3, device=device), torch.ones(0, device=device)).shape == (3, 0)


def test_int8_product_meets_bitsandbytes_error_bounds():
    # bitsandbytes' test_int8_linear_matmul_half: A ~ N(0, 0.5), B Xavier-uniform, 32 x 32 x 32, 20 draws, against
    # the float16 product within atol 0.025, rtol 0.05.
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        A = (torch.randn(32, 32, generator=g) * 0.5).half()
        bound = (6 / 64) ** 0.5
        B = ((torch.rand(32, 32, generator=g) * 2 - 1) * bound).half()
        CA, SA, _ = ops.int8_vectorwise_quant(A)
        CB, SB, _ = ops.int8_vectorwise_quant(B)
        got = ops.int8_mm_dequant(ops.int8_linear_matmul(CA, CB), SA, SB)
        torch.testing.assert_close(A @ B.t(), got, atol=0.025, rtol=0.05)


@pytest.mark.parametrize("call, message", [
    (lambda: ops.int8_vectorwise_quant(torch.ones(4, 4, dtype=torch.int8)), "A must be float32, float16 or bfloat16, "
                                                                            "got int8"),
    (lambda: ops.int8_vectorwise_quant(torch.ones(4, 4), -1.0), "threshold must be >= 0"),
    (lambda: ops.int8_vectorwise_quant(torch.ones(0, 4)), "A is empty"),
    (lambda: ops.int8_vectorwise_dequant(torch.ones(4, 4), torch.ones(4)), "A must be int8, got float32"),
    (lambda: ops.int8_vectorwise_dequant(torch.ones(4, 4, dtype=torch.int8), torch.ones(3)),
     "stats must hold 4 values (one per row of A), got 3"),
    (lambda: ops.int8_linear_matmul(torch.ones(4, 8, dtype=torch.int8), torch.ones(3, 7, dtype=torch.int8)),
     "A has 8 columns but B [3, 7] has 7"),
    (lambda: ops.int8_linear_matmul(torch.ones(4, 8), torch.ones(3, 8, dtype=torch.int8)), "A must be int8"),
    (lambda: ops.int8_linear_matmul(torch.ones(1, 131072, dtype=torch.int8), torch.ones(1, 131072, dtype=torch.int8)),
     "K = 131072 is too long for int32 sums"),
    (lambda: ops.int8_mm_dequant(torch.ones(4, 3, dtype=torch.int32), torch.ones(4), torch.ones(2)),
     "col_stats must hold 3 values (one per output column), got 2"),
    (lambda: ops.int8_mm_dequant(torch.ones(4, 3, dtype=torch.int32), torch.ones(4), torch.ones(3), torch.int8),
     "dtype must be float32, float16 or bfloat16, got int8"),
    (lambda: ops.int8_mm_dequant(torch.ones(4, 3, dtype=torch.int32), torch.ones(4), torch.ones(3), None,
                                 torch.ones(4)), "bias must be a vector of 3 values, got shape [4]"),
    (lambda: ops.int8_mixed_scaled_mm(torch.ones(2, 8), torch.ones(2, 8, dtype=torch.int8),
                                      torch.ones(3, 8, dtype=torch.int8), torch.ones(2), torch.ones(3),
                                      torch.tensor([8])), "outlier_cols holds an index outside [0, 8)"),
])
def test_bad_input_gives_a_clear_error(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference"])
def test_quantized_columns_are_read_again_once_changed(device, mode):
    # int8_mixed_scaled_mm reads the outlier columns' bounds unless they are the ones this thread's quantize just
    # returned, unchanged (a GPU would wait for the device at every layer): columns changed in place since, or from a
    # quantize over a longer K, or an inference tensor (which keeps no version), are still read.
    x = torch.zeros(2, 8, device=device)
    x[0, 6] = 50.0
    CB = torch.ones(3, 8, dtype=torch.int8, device=device)
    SCB = torch.full((3,), 127.0, device=device)  # the weight's values are 1
    context = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}[mode]
    with context():
        CA, SCA, cols = ops.int8_vectorwise_quant(x, 6.0)
        assert cols.tolist() == [6]
        out, _ = ops.int8_mixed_scaled_mm(x, CA, CB, SCA, SCB, cols, None)
        assert out.cpu().tolist() == [[50.0] * 3, [0.0] * 3]  # the outlier column alone, exactly
        cols[0] = 8  # past the last column
        with pytest.raises(RuntimeError, match=re.escape("outlier_cols holds an index outside [0, 8)")):
            ops.int8_mixed_scaled_mm(x, CA, CB, SCA, SCB, cols, None)
        wide = torch.zeros(1, 16, device=device)
        wide[0, 12] = 50.0
        cols = ops.int8_vectorwise_quant(wide, 6.0)[2]  # 12: inside the quantized K, outside this product's
        with pytest.raises(RuntimeError, match=re.escape("outlier_cols holds an index outside [0, 8)")):
            ops.int8_mixed_scaled_mm(x, CA, CB, SCA, SCB, cols, None)


def test_compiled_quantize_and_product_equal_eager():
    A = data((16, 256), torch.float16, seed=5)
    CB, SCB, _ = ops.int8_vectorwise_quant(data((64, 256), torch.float16, seed=6))

    def forward(a):
        CA, SCA, cols = ops.int8_vectorwise_quant(a, 6.0)
        return ops.int8_mixed_scaled_mm(a, CA, CB, SCA, SCB, cols, None)[0]

    compiled = torch.compile(forward, fullgraph=True, backend="aot_eager", dynamic=False)
    assert_same_bits(compiled(A), forward(A))
