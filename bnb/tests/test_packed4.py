"""The CPU layout of a 4-bit weight: bnb::pack_4bit and bnb::gemm_4bit_packed against the reference kernels, and
matmul_4bit's tiled copy of a weight given as tensors (knob cpu.pack_4bit): same results as bitsandbytes' layout
within rounding, a new copy when the weight changes. Linear4bit's repack in place: test_cpu_layout.py."""

import pytest
import torch

import bnb
from bnb import _C
from bnb import cpu_layout
from bnb import functional as F
from bnb.reference import blockwise4 as ref


def weight(N, K, blocksize, seed=0):
    W = torch.randn(N, K, generator=torch.Generator().manual_seed(seed))
    B, absmax = torch.ops.bnb.quantize_4bit(W, blocksize, "nf4", torch.uint8)
    return B, absmax


@pytest.mark.parametrize("N, K", [(1, 64), (37, 192), (16, 256), (40, 1024), (64, 4096)])
def test_unpack_gives_bitsandbytes_bytes_back(N, K):
    B, absmax = weight(N, K, 64)
    B = B.reshape(-1)
    codes, _ = torch.ops.bnb.pack_4bit(B, [N, K], absmax, 64)
    got = torch.ops.bnb.unpack_4bit(codes, [N, K])
    assert got.dtype == torch.uint8 and torch.equal(got, B)
    assert torch.equal(ref.unpack_4bit(codes, [N, K]), B)
    assert torch.ops.bnb.unpack_4bit(codes.to("meta"), [N, K]).shape == B.shape


def test_unpack_refuses_what_it_cannot_read():
    codes = torch.zeros(16 * 128 // 2, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r"unpack_4bit: the packed layout takes K \(96\) a multiple of 64"):
        torch.ops.bnb.unpack_4bit(codes, [8, 96])
    with pytest.raises(RuntimeError, match=r"unpack_4bit: codes must hold 1024 values"):
        torch.ops.bnb.unpack_4bit(codes[:-1], [8, 128])
    with pytest.raises(RuntimeError, match=r"unpack_4bit: codes must be uint8, got float32"):
        torch.ops.bnb.unpack_4bit(codes.float(), [8, 128])
    with pytest.raises(RuntimeError, match=r"unpack_4bit: shapeB must be \[N, K\] with N, K > 0"):
        torch.ops.bnb.unpack_4bit(codes, [0, 128])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_unpack_on_cuda_is_the_cpus():  # CUDA has no kernel of its own: the ATen composition (packed.cc)
    B, absmax = weight(37, 192, 64)
    codes, _ = torch.ops.bnb.pack_4bit(B, [37, 192], absmax, 64)
    assert torch.equal(torch.ops.bnb.unpack_4bit(codes.cuda(), [37, 192]).cpu(), B.reshape(-1))


@pytest.mark.parametrize("N, K, blocksize", [(1, 64, 64), (37, 192, 64), (16, 256, 128), (40, 1024, 1024)])
def test_pack_is_the_references_layout(N, K, blocksize):
    B, absmax = weight(N, K, blocksize)
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, blocksize)
    want_codes, want_scales = ref.pack_4bit(B, [N, K], absmax, blocksize)
    assert torch.equal(codes, want_codes) and torch.equal(scales, want_scales)
    # Meta: the same shapes.
    mc, ms = torch.ops.bnb.pack_4bit(B.to("meta"), [N, K], absmax.to("meta"), blocksize)
    assert mc.shape == codes.shape and ms.shape == scales.shape


def test_integer_data_is_exact_through_the_op():
    # Code values -8..7, power-of-two scales, integer A: every kernel's sums are exact, so all equal the float64 sum.
    N, K, bs = 33, 512, 64
    g = torch.Generator().manual_seed(3)
    B = torch.randint(0, 256, (N * K // 2,), generator=g, dtype=torch.uint8)
    absmax = 2.0 ** torch.randint(-2, 3, (N * K // bs,), generator=g).float()
    code = torch.arange(-8, 8, dtype=torch.float32)
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, bs)
    W = ref.dequantize_with_code(B, absmax, code, bs, [N, K], torch.float64)
    for dtype in (torch.bfloat16, torch.float32, torch.float16):
        for M in (1, 2, 9, 16, 32, 40, 64, 65):
            A = torch.randint(-3, 4, (M, K), generator=g).to(dtype)
            got = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], bs, code)
            want = (A.double() @ W.T).to(dtype)
            assert torch.equal(got, want), (dtype, M)


@pytest.mark.parametrize("amx", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("M", [1, 3, 16, 33, 64, 65, 129, 300])
def test_product_is_as_exact_as_the_reference(dtype, M, amx):
    # cpu.amx: bfloat16 from 3 rows on AMX tiles where the CPU has them (Sapphire Rapids on), else AVX512-BF16.
    N, K, bs = 70, 1024, 64
    B, absmax = weight(N, K, bs, seed=M)
    code = ref.code4("nf4")
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, bs)
    A = torch.randn(M, K, generator=torch.Generator().manual_seed(5)).to(dtype)
    bias = torch.randn(N, generator=torch.Generator().manual_seed(6)).to(dtype)
    with bnb.config.override(cpu__amx=amx):
        kernel = _C.gemm4_packed_kernel(str(dtype), min(M, 64))
        got = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, bias)
    if not amx or dtype != torch.bfloat16 or M < 3:
        assert kernel != "amx"
    elif "amx_bf16" in open("/proc/cpuinfo").read() and _C.gemm4_packed_runs(str(dtype), 1):
        assert kernel == "amx"  # (unless Linux refused the tile state: then this fails, naming it)
    want = ref.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, bias)
    exact = A.double() @ ref.dequantize_with_code(B, absmax, code, bs, [N, K], torch.float64).T + bias.double()
    err, ref_err = (got.double() - exact).abs().mean(), (want.double() - exact).abs().mean()
    assert err <= ref_err * 1.05, (err, ref_err)
    # Rows past one kernel call's run as slices of A; with no kernel for the dtype, the weight is dequantized by
    # ATen ops: the reference's bits.
    if not _C.gemm4_packed_runs(str(dtype), 1):
        assert torch.equal(got, want)


@pytest.mark.skipif(not _C.gemm4_packed_runs("float32", 1) or _C.gemm4_packed_kernel("float32", 600) == "avx512",
                    reason="no blocked float32 kernel under this cap")
def test_threads_split_rows_for_few_tiles_bit_for_bit():
    # 4 tiles and 600 rows: two threads take a slice of rows each (Gemm4PackedSplit), not two tiles each; every
    # row's sums are the same whatever the split (the blocked kernel's definition), so one thread's result is the bits.
    N, K, bs = 64, 320, 64
    B, absmax = weight(N, K, bs, seed=3)
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, bs)
    A = torch.randn(600, K, generator=torch.Generator().manual_seed(4))
    bias = torch.randn(N, generator=torch.Generator().manual_seed(5))
    code = ref.code4("nf4")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, bias)
        torch.set_num_threads(2)
        two = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, bias)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    want = ref.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, bias)
    exact = A.double() @ ref.dequantize_with_code(B, absmax, code, bs, [N, K], torch.float64).T + bias.double()
    assert (two.double() - exact).abs().mean() <= 1.05 * (want.double() - exact).abs().mean()


def test_bad_arguments_name_what_is_wrong():
    B, absmax = weight(8, 96, 32)
    with pytest.raises(RuntimeError, match=r"pack_4bit: the packed layout takes K \(96\) a multiple of 64"):
        torch.ops.bnb.pack_4bit(B, [8, 96], absmax, 32)
    B, absmax = weight(8, 128, 64)
    codes, scales = torch.ops.bnb.pack_4bit(B, [8, 128], absmax, 64)
    code = ref.code4("nf4")
    with pytest.raises(RuntimeError, match="gemm_4bit_packed: codes"):
        torch.ops.bnb.gemm_4bit_packed(torch.randn(1, 128), codes[:-1], scales, [8, 128], 64, code)
    with pytest.raises(RuntimeError, match=r"A's last dimension"):
        torch.ops.bnb.gemm_4bit_packed(torch.randn(1, 64), codes, scales, [8, 128], 64, code)
    with pytest.raises(RuntimeError, match="scales"):
        torch.ops.bnb.gemm_4bit_packed(torch.randn(1, 128), codes, scales.double(), [8, 128], 64, code)


def linear(compress, dtype=torch.bfloat16):
    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(256, 80, bias=True, compute_dtype=dtype, quant_type="nf4",
                              compress_statistics=compress).to(dtype).to("cpu")
    return layer.eval()


def product(layer, x):
    """matmul_4bit on the layer's weight as tensors (the functional form, whose tiled copy these tests follow)."""
    return bnb.matmul_4bit(x, layer.weight.data.t(), layer.weight.quant_state, bias=layer.bias)


def dense_result(layer, x):
    # The weight in float64, not in the layer's bfloat16 (read as bitsandbytes' bytes where the layer repacked it).
    B, state = cpu_layout.plain_form(layer.weight.data, layer.weight.quant_state)
    W = ref.dequantize_with_code(B, F._absmax_of(state), ref.code4(state.quant_type), state.blocksize,
                                 list(state.shape), torch.float64)
    return x.double() @ W.T + layer.bias.double()


@pytest.fixture
def knob():
    yield
    bnb.config.unset("cpu.pack_4bit")


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("rows", [1, 16])
def test_matmul_4bit_takes_the_layout_without_grad(knob, compress, rows):
    layer = linear(compress)
    x = torch.randn(rows, 256, dtype=torch.bfloat16)
    state = layer.weight.quant_state
    with torch.no_grad():
        bnb.config.set("cpu.pack_4bit", False)
        plain = product(layer, x)
        assert getattr(state, "_cpu_pack", None) is None
        bnb.config.set("cpu.pack_4bit", True)
        packed = product(layer, x)
    runs = _C.gemm4_packed_runs("bfloat16", rows)
    assert (getattr(state, "_cpu_pack", None) is not None) == runs
    exact = dense_result(layer, x)
    assert (packed.double() - exact).abs().mean() <= 1.1 * (plain.double() - exact).abs().mean()
    # The state dict is bitsandbytes' layout, as before.
    keys = set(layer.state_dict())
    assert not any("pack" in k for k in keys)


def test_a_changed_weight_gets_a_new_layout(knob):
    layer = linear(False)
    x = torch.randn(1, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        first = product(layer, x)
        # In place through the parameter (its version counter moves): codes of another weight.
        other = linear(False)
        other_B = other.weight.data.clone()
        layer.weight.copy_(torch.flip(other_B, [0]))
        layer.weight.quant_state.absmax.mul_(2)
        second = product(layer, x)
        bnb.config.set("cpu.pack_4bit", False)
        plain = product(layer, x)
    assert not torch.equal(first, second)
    torch.testing.assert_close(second.float(), plain.float(), rtol=0.02, atol=0.05)


def test_grad_and_non_finite_scales_keep_bitsandbytes_layout(knob):
    layer = linear(False, torch.float32)
    x = torch.randn(1, 256, requires_grad=True)
    layer(x).sum().backward()  # grad wanted: the differentiable op
    assert x.grad is not None and getattr(layer.weight.quant_state, "_cpu_pack", None) is None
    layer.weight.quant_state.absmax[3] = float("inf")
    with torch.no_grad():
        y = product(layer, x.detach())
        in_module = layer(x.detach())  # not repacked either
        assert cpu_layout.layout_of(layer.weight.quant_state) is None
        bnb.config.set("cpu.pack_4bit", False)
        plain = product(layer, x.detach())
    if _C.gemm4_packed_runs("float32", 1):  # checked once, then kept unpacked (no kernel: never looked at)
        assert layer.weight.quant_state._cpu_pack[2] is None
    assert torch.equal(in_module.isnan(), plain.isnan())
    assert torch.equal(torch.isnan(y), torch.isnan(plain))


def test_a_weight_replaced_through_data_gets_a_new_layout(knob):
    layer = linear(False)
    x = torch.randn(1, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        first = product(layer, x)
        new = torch.flip(layer.weight.data.clone(), [0])
        layer.weight.data = new  # a new tensor: another address, while the cache holds the old one
        second = product(layer, x)
        bnb.config.set("cpu.pack_4bit", False)
        plain = product(layer, x)
    assert not torch.equal(first, second)
    assert_close_bf16(second, plain)


def assert_close_bf16(a, b):
    torch.testing.assert_close(a.float(), b.float(), rtol=0.02, atol=0.05)


def test_inference_mode_weights_and_layouts(knob):
    # Weights made under inference_mode track no version and cannot take other data outside it: they keep
    # bitsandbytes' layout, in the module and in matmul_4bit (no crash, no stale copy). A layout made under
    # inference_mode serves later calls outside it, the module's and a tiled copy.
    x = torch.randn(1, 256, dtype=torch.bfloat16)
    with torch.inference_mode():
        made_inside = linear(False)
        y, y_product = made_inside(x), product(made_inside, x)
    assert getattr(made_inside.weight.quant_state, "_cpu_pack", None) is None
    assert cpu_layout.layout_of(made_inside.weight.quant_state) is None
    for call in (lambda layer: layer(x), lambda layer: product(layer, x)):
        layer = linear(False)
        with torch.inference_mode():
            inside = call(layer)
        with torch.no_grad():
            outside = call(layer)
        assert torch.equal(inside, outside)
    assert y.shape == y_product.shape == (1, 80)


@pytest.mark.parametrize("storage", [torch.uint8, torch.bfloat16, torch.float32])
def test_batches_of_any_shape_storage_and_bias_dtype(knob, storage):
    torch.manual_seed(1)
    layer = bnb.nn.Linear4bit(256, 80, bias=True, compute_dtype=torch.bfloat16, quant_storage=storage,
                              compress_statistics=True).to("cpu").eval()  # float32 bias, bfloat16 input
    x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        got = layer(x)
        bnb.config.set("cpu.pack_4bit", False)
        plain = layer(x)
    assert got.shape == plain.shape == (2, 3, 80) and got.dtype == plain.dtype
    assert_close_bf16(got, plain)
    exact = dense_result(layer, x.reshape(-1, 256)).reshape(2, 3, 80)
    assert (got.double() - exact).abs().mean() <= 1.1 * (plain.double() - exact).abs().mean()


# int8 activations (gemm_4bit_packed's int8_activations, knob cpu.int8_activations): the kernel and the ATen
# composition against the reference's definition, bit for bit; the error it costs; Linear4bit with the knob.

@pytest.fixture
def cap():
    yield
    bnb.config.unset("cpu.isa")
    bnb.config.unset("cpu.int8_activations")


def int8_cases(dtype, M, seed):
    N, K, bs = 37, 512, 128
    B, absmax = weight(N, K, bs, seed=seed)
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, bs)
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(dtype)
    if M >= 4:
        A[1, :64] = 0                  # a group of zeros
        A[2, 70] = float("inf")        # a row with an infinity
        A[3, 500] = float("nan")       # a row with a NaN
        A[0, 128:192] = torch.tensor([127.0] + [0.5, 2.5] * 31 + [1.5]).to(dtype)  # q ties: 0.5 -> 0, 2.5 -> 2
    bias = torch.randn(N, generator=g).to(dtype)
    return (A, codes, scales, [N, K], bs), bias


def same(got, want):
    return torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("path", ["kernel", "composition"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("M", [1, 5, 16, 70])
def test_int8_activations_follow_the_definition(cap, path, dtype, M):
    if path == "kernel" and not _C.gemm4_packed_int8_runs():
        pytest.skip("no AVX512-VNNI kernel on this CPU")
    if path == "composition":
        bnb.config.set("cpu.isa", "avx2")  # no int8 kernel under this cap: ops.h composes the product
        assert not _C.gemm4_packed_int8_runs()
    args, bias = int8_cases(dtype, M, seed=M)
    code = ref.code4("nf4")
    for b in (None, bias):
        got = torch.ops.bnb.gemm_4bit_packed(*args, code, b, True)
        want = ref.gemm_4bit_packed(*args, code, b, True)
        assert got.dtype == dtype and got.shape == want.shape
        assert same(got, want), (got.float() - want.float()).abs().nan_to_num().max()
    if M >= 4:
        assert got[2].isnan().all() and got[3].isnan().all() and not got[[0, 1]].isnan().any()
    meta = torch.ops.bnb.gemm_4bit_packed(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args],
                                          code.to("meta"), None, True)
    assert meta.shape == got.shape


def test_int8_activations_cost_stated_error():
    # The knob's documented cost: on Gaussian data about 4x the error of bfloat16 products against the float64 product
    # of the dequantized weight, while against the original weight the 4-bit codes' own error dominates.
    N, K, bs = 256, 2048, 64
    W = torch.randn(N, K, generator=torch.Generator().manual_seed(8)) * 0.02
    B, absmax = torch.ops.bnb.quantize_4bit(W, bs, "nf4", torch.uint8)
    code = ref.code4("nf4")
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, bs)
    A = torch.randn(16, K, generator=torch.Generator().manual_seed(9)).bfloat16()
    Wd = ref.dequantize_with_code(B, absmax, code, bs, [N, K], torch.float64)
    exact, original = A.double() @ Wd.T, A.double() @ W.double().T

    def rel(y, to):
        return ((y.double() - to).abs().mean() / to.abs().mean()).item()

    int8 = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, None, True)
    bf16 = torch.nn.functional.linear(A, Wd.bfloat16())
    assert 2 * rel(bf16, exact) < rel(int8, exact) < 6 * rel(bf16, exact) < 0.02
    assert rel(int8, original) < 1.02 * rel(bf16, original)


def test_int8_activations_refuse_code_values_outside_one():
    args, _ = int8_cases(torch.float32, 2, seed=1)
    code = ref.code4("nf4").clone()
    code[5] = 1.5
    with pytest.raises(RuntimeError, match=r"int8_activations takes code values in \[-1, 1\].*code\[5\] = 1.5"):
        torch.ops.bnb.gemm_4bit_packed(*args, code, None, True)
    with pytest.raises(RuntimeError, match=r"code\[5\] = 1.5"):
        ref.gemm_4bit_packed(*args, code, None, True)


@pytest.mark.parametrize("rows", [1, 16, 100])
def test_linear4bit_with_int8_activations(knob, cap, rows):
    layer = linear(compress=True)
    x = torch.randn(rows, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        default = layer(x)
        bnb.config.set("cpu.int8_activations", True)
        got = layer(x)
    state = layer.weight.quant_state
    if not _C.gemm4_packed_int8_runs():  # no kernel: the knob changes nothing
        assert torch.equal(got, default)
        return
    codes, scales = layer.weight.data.reshape(-1), cpu_layout.layout_of(state).scales  # repacked in place
    want = ref.gemm_4bit_packed(x, codes, scales, list(state.shape), state.blocksize, ref.code4("nf4"),
                                layer.bias, True)
    assert torch.equal(got, want)
    exact = dense_result(layer, x)
    assert (got.double() - exact).abs().mean() < 6 * (default.double() - exact).abs().mean()
