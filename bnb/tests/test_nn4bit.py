"""bnb.nn 4-bit modules: quantize on move, forward paths, autograd, state dicts (bitsandbytes' keys), compile."""

import copy
import io
import json
import logging
import re
import warnings

import pytest
import torch

import bnb
from bnb import functional as F
from helpers import assert_same_bits


def make_linear(quant_type="nf4", compress=True, storage=torch.uint8, bias=True, compute_dtype=None):
    torch.manual_seed(0)
    dense = torch.nn.Linear(128, 96, bias=bias)
    layer = bnb.nn.Linear4bit(128, 96, bias=bias, quant_type=quant_type, compress_statistics=compress,
                              quant_storage=storage, compute_dtype=compute_dtype)
    layer.load_state_dict(dense.state_dict())
    return dense, layer


def test_quantization_happens_on_move():
    dense, layer = make_linear()
    assert not layer.weight.bnb_quantized and layer.weight.shape == (96, 128)
    layer = layer.to("cpu")
    w = layer.weight
    assert isinstance(w, bnb.nn.Params4bit) and w.bnb_quantized
    assert w.shape == (96 * 128 // 2, 1) and w.dtype == torch.uint8
    assert layer.quant_state is w.quant_state and w.quant_state.shape == (96, 128)
    back = F.dequantize_4bit(w, w.quant_state)
    assert (back - dense.weight).abs().mean() < 0.1 * dense.weight.abs().mean() * 1.5
    layer.to("cpu")  # a second move keeps the quantized weight
    assert layer.weight.shape == (96 * 128 // 2, 1)


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("storage", [torch.uint8, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("compress", [False, True])
def test_forward_paths(quant_type, storage, compress):
    dense, layer = make_linear(quant_type, compress, storage)
    layer = layer.to("cpu")
    W = F.dequantize_4bit(layer.weight, layer.weight.quant_state)
    # bitsandbytes' layout (the tiled copy, which rounds otherwise, is test_packed4.py's).
    with torch.no_grad(), bnb.config.override(cpu__pack_4bit=False):
        x1 = torch.randn(1, 1, 128)  # one token: gemv_4bit, W never materialized
        want = F.gemv_4bit(x1, layer.weight, state=layer.weight.quant_state) + layer.bias
        assert_same_bits(layer(x1), want)
        xb = torch.randn(4, 7, 128)  # a small batch: one pass over the weight where a kernel runs, else dequantize
        got = layer(xb)
        dense_path = torch.nn.functional.linear(xb, W, layer.bias)
        if bnb._C.gemm4_small_kernel("float32", 28, 128) == "none":  # the scalar target
            assert_same_bits(got, dense_path)
        else:  # each row exactly as the one-token path computes it (float32 A, blocks of 64)
            rows = [F.gemv_4bit(r.view(1, 128), layer.weight, state=layer.weight.quant_state) + layer.bias
                    for r in xb.reshape(-1, 128)]
            assert_same_bits(got.reshape(-1, got.shape[-1]), torch.cat(rows))
            torch.testing.assert_close(got, dense_path, rtol=1e-5, atol=1e-5)
        xl = torch.randn(70, 128)  # more rows than the small-batch kernels take: dequantize + dense matmul
        assert_same_bits(layer(xl), torch.nn.functional.linear(xl, W, layer.bias))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_token_bias_rounds_once(dtype):
    """The 1-token path adds a bias of its own dtype in one op: the bits of the float32 sum rounded once, also
    where the sum's rounding and a second rounding of the bias would differ."""
    from bnb.autograd import _plus_bias
    g = torch.Generator().manual_seed(0)
    y = (torch.randn(4096, generator=g) * torch.logspace(-3, 3, 4096)).to(dtype)
    bias = (torch.randn(4096, generator=g) * torch.logspace(3, -3, 4096)).to(dtype)
    assert_same_bits(_plus_bias(y, bias), (y.float() + bias.float()).to(dtype))
    assert _plus_bias(y, bias).dtype == dtype


def test_one_token_code_table_is_the_ops_own():
    """The 1-token path reads a code table kept per (quant_type, device); what get_4bit_type hands out is a fresh
    tensor each time, so a user who writes into it changes no layer's output."""
    dense, layer = make_linear(compute_dtype=torch.bfloat16)
    layer = layer.to("cpu")
    x = torch.randn(1, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        before = layer(x)
        F.get_4bit_type("nf4").mul_(0)
        assert_same_bits(layer(x), before)
    assert F._code4("nf4", x.device) is F._code4("nf4", x.device)
    assert_same_bits(F._code4("fp4", x.device), F.get_4bit_type("fp4"))


def test_compute_dtype_and_input_dtype():
    dense, layer = make_linear(compute_dtype=torch.bfloat16)
    layer = layer.to("cpu")
    with torch.no_grad():
        y = layer(torch.randn(3, 128))
    assert y.dtype == torch.float32  # computed in bf16, returned in the input's dtype
    with torch.no_grad():
        assert layer(torch.randn(3, 128, dtype=torch.float16)).dtype == torch.float16


def test_compute_dtype_settled_by_first_call_as_in_bitsandbytes():
    _, fixed = make_linear(compute_dtype=torch.bfloat16)
    fixed = fixed.to("cpu")
    _, free = make_linear()
    free = free.to("cpu")
    assert fixed.compute_type_is_set and not free.compute_type_is_set
    x32 = torch.randn(3, 128)
    with torch.no_grad():
        free(x32.bfloat16())  # the first call settles bfloat16
        assert free.compute_type_is_set and free.compute_dtype == torch.bfloat16
        y = free(x32)
        assert y.dtype == torch.float32
        assert_same_bits(y, fixed(x32))  # computed in bfloat16, as the explicit setting does
        W = F.dequantize_4bit(free.weight, free.weight.quant_state)
        assert not torch.equal(y, torch.nn.functional.linear(x32, W, free.bias))  # not float32's answer
    _, first32 = make_linear(compute_dtype=None)
    first32 = first32.to("cpu")
    with torch.no_grad():
        first32(x32)
        assert first32.compute_dtype == torch.float32
        assert first32(x32.bfloat16()).dtype == torch.bfloat16  # computed in float32, returned as the input


def test_float16_input_with_float32_compute_is_logged_as_bitsandbytes_logs_it(caplog):
    # bitsandbytes' tests read these from the caplog of the module's logger, on each layer's first call.
    x = torch.randn(4, 128, dtype=torch.float16)
    for rows, tail in ((4, "slow inference or training speed."), (1, "slow inference.")):
        for _ in range(2):  # a second layer logs again, as in bitsandbytes
            caplog.clear()
            _, layer = make_linear()
            layer = layer.to("cpu")
            with caplog.at_level(logging.WARNING, logger="bnb.nn.modules"), warnings.catch_warnings():
                warnings.simplefilter("error")  # through logging only, not warnings too
                with torch.no_grad():
                    y = layer(x[:rows])
                    layer(x[:rows])  # settled: the second call logs nothing
            assert [(r.name, r.levelno) for r in caplog.records] == [("bnb.nn.modules", logging.WARNING)]
            assert caplog.messages[0] == ("Input type into Linear4bit is torch.float16, but bnb_4bit_compute_dtype="
                                          f"torch.float32 (default). This will lead to {tail}")
            assert y.dtype == torch.float16 and layer.compute_dtype is None and layer.compute_type_is_set


def test_embedding_width_off_the_blocksize_is_logged_as_bitsandbytes_logs_it(caplog):
    with caplog.at_level(logging.WARNING, logger="bnb.nn.modules"):
        bnb.nn.EmbeddingNF4(10, 64)
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="bnb.nn.modules"):
        bnb.nn.EmbeddingNF4(10, 65)
    assert [r.name for r in caplog.records] == ["bnb.nn.modules"]
    assert "Embedding size 65 is not divisible by block size 64" in caplog.messages[0]
    assert "slow inference" in caplog.messages[0]


def test_autograd_to_input_and_bias():
    dense, layer = make_linear(compress=False)
    layer = layer.to("cpu")
    layer.bias.requires_grad_(True)
    W = F.dequantize_4bit(layer.weight, layer.weight.quant_state)
    for x in (torch.randn(5, 128, requires_grad=True), torch.randn(1, 128, requires_grad=True)):
        layer(x).pow(2).sum().backward()
        x2 = x.detach().clone().requires_grad_(True)
        b2 = layer.bias.detach().clone().requires_grad_(True)
        torch.nn.functional.linear(x2, W, b2).pow(2).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
        torch.testing.assert_close(layer.bias.grad, b2.grad)
        layer.bias.grad = None


def test_unquantized_module_says_what_to_do():
    _, layer = make_linear()
    with pytest.raises(RuntimeError, match="move the module to a device"):
        layer(torch.randn(1, 128))


@pytest.mark.parametrize("compress", [False, True])
def test_state_dict_round_trip(compress):
    _, layer = make_linear("fp4", compress)
    layer = layer.to("cpu")
    sd = layer.state_dict()
    keys = {"weight", "bias", "weight.absmax", "weight.quant_map", "weight.quant_state.bitsandbytes__fp4"}
    if compress:
        keys |= {"weight.nested_absmax", "weight.nested_quant_map"}
    assert set(sd) == keys
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    fresh = bnb.nn.Linear4bit(128, 96, quant_type="fp4")
    fresh.load_state_dict(torch.load(buf))
    assert fresh.weight.bnb_quantized and fresh.weight.quant_state == layer.weight.quant_state
    x = torch.randn(2, 128)
    with torch.no_grad():
        assert_same_bits(fresh(x), layer(x))


def test_loads_a_bitsandbytes_state_dict():
    # Written out by hand as bitsandbytes 0.50 saves an NF4 Linear4bit with compress_statistics=True.
    W = torch.randn(96, 128)
    packed, absmax = torch.ops.bnb.quantize_4bit(W, 64, "nf4", torch.uint8)
    offset = absmax.mean()
    q_absmax, nested_absmax = torch.ops.bnb.quantize_blockwise(absmax - offset, F.create_dynamic_map(), 256)
    meta = {"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [96, 128],
            "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": offset.item()}
    sd = {
        "weight": packed,
        "bias": torch.zeros(96),
        "weight.absmax": q_absmax,
        "weight.quant_map": F.get_4bit_type("nf4"),
        "weight.nested_absmax": nested_absmax,
        "weight.nested_quant_map": F.create_dynamic_map(),
        "weight.quant_state.bitsandbytes__nf4": torch.tensor(list(json.dumps(meta).encode()), dtype=torch.uint8),
    }
    layer = bnb.nn.Linear4bit(128, 96, quant_type="nf4")
    layer.load_state_dict(sd)
    state = layer.weight.quant_state
    assert state.nested and state.blocksize == 64 and state.shape == (96, 128) and state.quant_type == "nf4"
    W_back = torch.ops.bnb.dequantize_4bit(packed, absmax, 64, "nf4", [96, 128], torch.float32)
    torch.testing.assert_close(F.dequantize_4bit(layer.weight, state), W_back, rtol=0.02, atol=2e-3)


def test_compile_fullgraph_no_graph_breaks():
    torch.manual_seed(0)
    model = torch.nn.Sequential(bnb.nn.LinearNF4(128, 256), torch.nn.GELU(), bnb.nn.LinearFP4(256, 64)).to("cpu")
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        for x in (torch.randn(1, 128), torch.randn(8, 128)):  # the gemv and the dense path
            torch.testing.assert_close(compiled(x), model(x))


class _WithAndWithoutBias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.biased = bnb.nn.LinearNF4(256, 256)
        self.plain = bnb.nn.LinearNF4(256, 256, bias=False)

    def forward(self, x):
        return self.biased(x), self.plain(x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_compiled_linear4bit_equals_eager_bit_for_bit(dtype):
    # float32 parameters, the bias too, and activations of `dtype` (the compute dtype then): eager rounded
    # bias.to(dtype) before adding it to one row, where inductor fused the cast into the add (0.0078 for bfloat16).
    torch.manual_seed(0)
    model = _WithAndWithoutBias().to("cpu")
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    # A compiled graph multiplies bitsandbytes' layout; eager inference the tiled copy where cpu.pack_4bit allows
    # (test_packed4.py), which rounds otherwise: the same bits with the knob off.
    with bnb.config.override(cpu__pack_4bit=False):
        for rows in (1, 16):  # gemv_4bit, gemm_4bit
            x = torch.randn(rows, 256, dtype=dtype)
            with torch.no_grad():
                for want, got in zip(model(x), compiled(x)):
                    assert_same_bits(got, want)


def test_copies_and_pickling():
    _, layer = make_linear()
    layer = layer.to("cpu")
    clone = copy.deepcopy(layer)
    assert clone.weight.quant_state == layer.weight.quant_state
    assert clone.weight.data_ptr() != layer.weight.data_ptr()
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    x = torch.randn(2, 128)
    with torch.no_grad():
        assert_same_bits(again(x), layer(x))


# A multiple of the blocksize (rows by bytes and blocks), not (element by element), and odd (rows start mid-byte).
@pytest.mark.parametrize("dim", [128, 96, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cls", [bnb.nn.EmbeddingNF4, bnb.nn.EmbeddingFP4])
def test_embedding4bit(cls, dtype, dim):
    torch.manual_seed(0)
    dense = torch.nn.Embedding(50, dim)
    emb = cls(50, dim, dtype=dtype)
    emb.load_state_dict(dense.state_dict())
    emb = emb.to("cpu")
    idx = torch.tensor([[0, 7, 49], [3, 3, 1]])
    table = F.dequantize_4bit(emb.weight, emb.weight.quant_state).to(dtype)
    assert_same_bits(emb(idx), torch.nn.functional.embedding(idx, table))
    assert (emb(idx).float() - dense(idx)).abs().mean() < 0.15
    torch._dynamo.reset()  # each case compiles forward afresh, not as one of a code object's few recompiles
    assert_same_bits(torch.compile(emb, fullgraph=True)(idx), emb(idx))
    for bad in (50, -1):  # as nn.Embedding: an index out of range is an error, not a read past the table
        with pytest.raises(IndexError):
            emb(torch.tensor([0, bad]))


def test_assign_load_keeps_a_complete_state_dict():
    # load_state_dict(assign=True) takes the checkpoint's tensors as they are, and the next state dict still carries
    # the quantization keys.
    src = bnb.nn.LinearNF4(64, 32).to("cpu")
    dst = bnb.nn.LinearNF4(64, 32)
    dst.load_state_dict(src.state_dict(), assign=True)
    x = torch.randn(2, 64)
    assert_same_bits(dst(x), src(x))
    assert set(dst.state_dict()) == set(src.state_dict())
    again = bnb.nn.LinearNF4(64, 32)
    again.load_state_dict(dst.state_dict())
    assert_same_bits(again(x), src(x))


def test_loading_a_weight_of_another_shape_is_an_error():
    src = bnb.nn.LinearNF4(64, 32, bias=False).to("cpu")
    dst = bnb.nn.LinearNF4(32, 64, bias=False)
    with pytest.raises(RuntimeError, match=r"size mismatch for weight: the checkpoint holds a 4-bit weight of shape "
                                           r"\(32, 64\), the current model's is \(64, 32\)"):
        dst.load_state_dict(src.state_dict())


@pytest.mark.parametrize("convert", ["half", "bfloat16", "float"])
def test_module_dtype_conversions_keep_the_codes(convert):
    # Module.half() & co. convert floating parameters as numbers: float-stored codes must survive them.
    layer = bnb.nn.LinearNF4(64, 32, quant_storage=torch.bfloat16).to("cpu")
    before = layer.weight.data.clone()
    x = torch.randn(2, 64)
    y = layer(x)
    getattr(layer, convert)()
    assert isinstance(layer.weight, bnb.nn.Params4bit)
    assert_same_bits(layer.weight.data, before)
    assert torch.allclose(layer(x.to(layer.bias.dtype)).float(), y, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("quantized", [True, False])
def test_chunk_and_split_keep_params4bit_and_its_state_as_fsdp2_needs(quantized):
    # FSDP2 shards parameters with torch.chunk: the shards were plain tensors, their quant state lost.
    layer = bnb.nn.LinearNF4(128, 64)
    w = layer.to("cpu").weight if quantized else layer.weight
    flat = w.data.reshape(-1)
    rows = w.shape[0]
    for pieces in (torch.chunk(w, 3), torch.split(w, rows // 3 + 1), w.chunk(4), w.split([5, rows - 5])):
        assert isinstance(pieces, tuple) and len(pieces) > 1
        for piece in pieces:
            assert type(piece) is bnb.nn.Params4bit
            assert piece.quant_state is w.quant_state and piece.module is w.module
            assert (piece.quant_type, piece.blocksize, piece.bnb_quantized, piece.quant_storage) == \
                   (w.quant_type, w.blocksize, w.bnb_quantized, w.quant_storage)
            assert piece.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()  # views, as chunk gives
        assert_same_bits(torch.cat([p.data.reshape(-1) for p in pieces]), flat)
    assert type(w + 0) is torch.Tensor and type(w[:2]) is torch.Tensor  # other ops: plain tensors, as before


def test_shallow_copy_is_a_params4bit():
    w = bnb.nn.LinearNF4(64, 32).to("cpu").weight
    c = copy.copy(w)
    assert isinstance(c, bnb.nn.Params4bit) and c.quant_state is w.quant_state


def test_dequantize_4bit_transposes_a_transposed_weight_back():
    W = torch.randn(32, 64)
    packed, state = F.quantize_4bit(W, quant_type="nf4")
    assert F.dequantize_4bit(packed, state).shape == (32, 64)
    assert_same_bits(F.dequantize_4bit(packed.t(), state), F.dequantize_4bit(packed, state).t())  # as bitsandbytes


def test_quant_storage_must_be_a_packing_type():
    with pytest.raises(RuntimeError, match="quant_storage must be uint8, bfloat16, float16 or float32 .*got int32"):
        torch.ops.bnb.quantize_4bit(torch.randn(64), 64, "nf4", torch.int32)
    packed, state = F.quantize_4bit(torch.randn(8, 64), quant_type="nf4")
    with pytest.raises(RuntimeError, match="must be uint8, bfloat16, float16 or float32"):
        torch.ops.bnb.dequantize_4bit(packed.reshape(-1).view(torch.int32), F._absmax_of(state), 64, "nf4", [8, 64],
                                      torch.float32)
    assert not hasattr(F.quantize_blockwise(torch.randn(64))[1], "bitsandbytes__nf4")  # an 8-bit state


@pytest.mark.parametrize("dim", [7, 100, 128])  # off the blocksize (element by element), a multiple (by rows)
@pytest.mark.parametrize("shape", [(-1, 1), (1, -1)])
def test_embedding4bit_takes_a_checkpoint_s_2d_absmax(dim, shape):
    # The ops take absmax of any shape with the right count; the element path indexed it and broadcast [1, 7] rows
    # into [1, 7, 7] (or failed).
    torch.manual_seed(0)
    src = bnb.nn.EmbeddingNF4(20, dim).to("cpu")
    sd = src.state_dict()
    sd["weight.absmax"] = sd["weight.absmax"].reshape(shape)
    dst = bnb.nn.EmbeddingNF4(20, dim)
    dst.load_state_dict(sd)
    assert dst.quant_state.absmax.dim() == 2
    idx = torch.tensor([[0, 3, 7, 19, 2, 2, 11]])
    table = F.dequantize_4bit(src.weight, src.quant_state)
    assert_same_bits(dst(idx), torch.nn.functional.embedding(idx, table))


def test_embedding4bit_indices_like_nn_embedding():
    emb = bnb.nn.EmbeddingNF4(10, 64).to("cpu")
    with pytest.raises(IndexError):
        emb(torch.tensor([-1]))
    with pytest.raises(IndexError):
        emb(torch.tensor([10]))
    assert emb(torch.empty(0, dtype=torch.long)).shape == (0, 64)
    assert emb(torch.tensor([[1, 2], [3, 9]])).shape == (2, 2, 64)


def _pickled(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("how", ["assign", "pickle"])
def test_loaded_and_unpickled_weights_stay_params4bit_through_dtype_conversions(how):
    # Both used to leave a plain Parameter until the next forward, and .half() then converted the codes as numbers.
    src = bnb.nn.LinearNF4(64, 32, quant_storage=torch.bfloat16).to("cpu")
    if how == "assign":
        dst = bnb.nn.LinearNF4(64, 32, quant_storage=torch.bfloat16)
        dst.load_state_dict(src.state_dict(), assign=True)
    else:
        dst = _pickled(src)
    assert isinstance(dst.weight, bnb.nn.Params4bit) and dst.weight.quant_state is dst.quant_state
    dst.half()
    assert_same_bits(dst.weight.data, src.weight.data)
    x = torch.randn(2, 64)
    with torch.no_grad():
        torch.testing.assert_close(dst(x.half()).float(), src(x), rtol=2e-2, atol=2e-2)
    dst.float()
    assert_same_bits(dst.weight.data, src.weight.data)


def test_pickled_unquantized_module_still_quantizes_on_move():
    again = _pickled(bnb.nn.EmbeddingNF4(10, 64))
    assert isinstance(again.weight, bnb.nn.Params4bit) and not again.weight.bnb_quantized
    again = again.to("cpu")
    assert again.weight.bnb_quantized and again.quant_state is again.weight.quant_state
    assert again(torch.tensor([1])).shape == (1, 64)


def test_deepcopy_of_an_unquantized_module_quantizes_into_the_copy():
    layer = bnb.nn.LinearNF4(64, 32)
    clone = copy.deepcopy(layer).to("cpu")
    assert clone.weight.module is clone and clone.quant_state is clone.weight.quant_state
    assert layer.quant_state is None and not layer.weight.bnb_quantized
    assert copy.deepcopy(clone.weight).module is None  # a parameter copied alone belongs to no module


def test_integer_input_is_an_error_and_settles_nothing():
    layer = bnb.nn.LinearNF4(64, 4).to("cpu")
    for rows in (3, 1):
        with pytest.raises(RuntimeError, match="input must be a floating-point tensor, got int64"):
            layer(torch.randint(-3, 4, (rows, 64)))
    assert not layer.compute_type_is_set
    layer(torch.randn(2, 64, dtype=torch.bfloat16))
    assert layer.compute_dtype == torch.bfloat16


def test_input_of_the_wrong_width_is_an_error_even_where_it_fits_a_transposed_weight():
    layer = bnb.nn.LinearNF4(64, 32).to("cpu")
    for shape in ((3, 32), (1, 32), (2, 65)):  # 32 = out_features: matmul_4bit alone would take it as [K, N]
        with pytest.raises(RuntimeError, match=rf"input has {shape[-1]} features \(shape \[{shape[0]}, "
                                               rf"{shape[1]}\]\), the layer takes 64"):
            layer(torch.randn(*shape))


def test_float64_input_works_for_one_row_as_for_several():
    layer = bnb.nn.LinearNF4(64, 32, compute_dtype=torch.float64).to("cpu")
    W = F.dequantize_4bit(layer.weight, layer.quant_state).double()
    x = torch.randn(3, 64, dtype=torch.float64)
    with torch.no_grad():
        for rows in (x, x[:1]):
            out = layer(rows)
            assert out.dtype == torch.float64
            torch.testing.assert_close(out, torch.nn.functional.linear(rows, W, layer.bias.double()))


def test_params4bit_exposes_its_quant_state_for_fsdp():
    # FSDP resolves state-dict keys such as "weight.absmax" by getattr on the weight (bitsandbytes 0.50's properties).
    layer = bnb.nn.LinearNF4(128, 64).to("cpu")
    w, state = layer.weight, layer.quant_state
    for key, value in layer.state_dict().items():
        if key.startswith("weight.") and not key.startswith("weight.quant_state."):
            assert getattr(w, key[len("weight."):]) is value or torch.equal(getattr(w, key[len("weight."):]), value)
    assert w.absmax is state.absmax and w.quant_map is state.code and w.state2 is state.state2
    assert w.nested_blocksize == state.state2.blocksize and w.nested_offset is state.offset
    plain = bnb.nn.LinearNF4(128, 64, compress_statistics=False).to("cpu").weight
    assert plain.state2 is None
    with pytest.raises(AttributeError, match="nested_absmax"):
        plain.nested_absmax
    with pytest.raises(AttributeError, match="absmax"):
        bnb.nn.LinearNF4(128, 64).weight.absmax  # not quantized yet


def test_incomplete_quantized_state_dicts_report_their_missing_keys():
    src = bnb.nn.LinearNF4(128, 64).to("cpu")
    for drop in ("weight.quant_map", "weight.absmax", "weight.nested_absmax", "weight.quant_state.bitsandbytes__nf4"):
        sd = {k: v for k, v in src.state_dict().items() if k != drop}
        dst = bnb.nn.LinearNF4(128, 64)
        result = dst.load_state_dict(sd, strict=False)
        assert result.missing_keys == [drop] and result.unexpected_keys == []
        assert not dst.weight.bnb_quantized and dst.weight.shape == (64, 128)  # left as it was
        with pytest.raises(RuntimeError, match=f"Missing key.*{drop}"):
            bnb.nn.LinearNF4(128, 64).load_state_dict(sd)
    sd = dict(src.state_dict(), **{"weight.extra": torch.zeros(1)})
    dst = bnb.nn.LinearNF4(128, 64)
    assert dst.load_state_dict(sd, strict=False).unexpected_keys == ["weight.extra"]
    assert dst.weight.bnb_quantized
    with pytest.raises(RuntimeError, match="Unexpected key.*weight.extra"):
        bnb.nn.LinearNF4(128, 64).load_state_dict(sd)
    sd = dict(src.state_dict(), **{"weight.quant_state.bitsandbytes__nf4": torch.tensor([0xFF], dtype=torch.uint8)})
    with pytest.raises(RuntimeError, match="while loading weight: its quant_state metadata is unreadable"):
        bnb.nn.LinearNF4(128, 64).load_state_dict(sd)


@pytest.mark.parametrize("nested", [True, False])
def test_truncated_checkpoints_are_refused_on_load_naming_the_key(nested):
    # 128 x 64 = 8192 values: 4096 bytes, 128 blocks of 64, nested: one scale per 256 absmax codes.
    src = bnb.nn.LinearNF4(128, 64, compress_statistics=nested).to("cpu")
    cases = {"weight": 4096, "weight.absmax": 128, "weight.quant_map": 16}
    if nested:
        cases.update({"weight.nested_absmax": 1, "weight.nested_quant_map": 256})
    for key, need in cases.items():
        sd = src.state_dict()
        sd[key] = torch.cat([sd[key], sd[key][:1]]) if need == 1 else sd[key][:need // 2]
        got = sd[key].numel()
        dst = bnb.nn.LinearNF4(128, 64, compress_statistics=nested)
        if key.endswith("quant_map"):  # a code table's size does not depend on the shape
            message = rf"while loading {re.escape(key)}: expected {need} values, got {got}"
        else:
            message = rf"size mismatch for {re.escape(key)}: holds {got} .*with blocksize \d+ needs {need}"
        with pytest.raises(RuntimeError, match=message):
            dst.load_state_dict(sd)
        assert not dst.weight.bnb_quantized  # left as it was
    stats = {k.removeprefix("weight."): v for k, v in src.state_dict().items() if k.startswith("weight.")}
    with pytest.raises(ValueError, match="from_prequantized: data: holds 100 packed codes"):
        bnb.nn.Params4bit.from_prequantized(src.weight.data[:100], stats)


def test_load_keeps_the_parameter_object_and_copies_the_checkpoint():
    src = bnb.nn.LinearNF4(64, 32).to("cpu")
    dst = bnb.nn.LinearNF4(64, 32).to("cpu")
    for target in (bnb.nn.LinearNF4(64, 32), dst):  # unquantized, and quantized already
        before = target.weight
        target.load_state_dict(src.state_dict())
        assert target.weight is before and before.bnb_quantized and target.quant_state is before.quant_state
        assert target.weight.data_ptr() != src.weight.data_ptr()
        assert target.quant_state.absmax.data_ptr() != src.quant_state.absmax.data_ptr()
        x = torch.randn(2, 64)
        with torch.no_grad():
            assert_same_bits(target(x), src(x))


def test_embedding_rows_round_through_the_state_dtype_like_the_table():
    # A bfloat16 table loaded into a float32 module: the row lookups (dim a multiple of the blocksize) must round
    # to bfloat16 first, as the whole-table path and bitsandbytes do.
    src = bnb.nn.EmbeddingNF4(20, 128, dtype=torch.bfloat16).to("cpu")
    dst = bnb.nn.EmbeddingNF4(20, 128)
    dst.load_state_dict(src.state_dict())
    table = F.dequantize_4bit(dst.weight, dst.quant_state)
    assert table.dtype == torch.bfloat16
    idx = torch.tensor([[0, 19], [5, 5]])
    assert_same_bits(dst(idx), torch.nn.functional.embedding(idx, table.float()))


def test_matmul_4bit_batches_compute_rows_as_the_single_row_path():
    # A bfloat16-quantized weight against float32 activations: the batch used to round W to bfloat16 first.
    W = torch.randn(256, 512, dtype=torch.bfloat16)
    q, s = F.quantize_4bit(W, quant_type="nf4")
    W32 = torch.ops.bnb.dequantize_4bit(q, F._absmax_of(s), 64, "nf4", [256, 512], torch.float32)
    A = torch.randn(4, 512)
    ref = (A.double() @ W32.double().t()).float()
    torch.testing.assert_close(bnb.matmul_4bit(A, q, s), ref, rtol=1e-5, atol=1e-4)
    rows = torch.cat([bnb.matmul_4bit(A[i:i + 1], q, s) for i in range(4)])
    torch.testing.assert_close(bnb.matmul_4bit(A, q, s), rows, rtol=1e-5, atol=1e-4)


def _meta_of(sd, quant_type="nf4"):
    return json.loads(bytes(sd[f"weight.quant_state.bitsandbytes__{quant_type}"].tolist()))


def _with_meta(sd, meta, quant_type="nf4"):
    packed = torch.tensor(list(json.dumps(meta).encode()), dtype=torch.uint8)
    return dict(sd, **{f"weight.quant_state.bitsandbytes__{quant_type}": packed})


def test_matmul_4bit_computes_one_row_as_a_batch_whatever_state_code_holds():
    # One row took gemv_4bit with state.code, a batch the quant_type's table: a changed code (a NaN from a bad
    # checkpoint) made the results depend on the batch size. Both now read the table, as bitsandbytes' matmul_4bit.
    W = torch.randn(32, 64)
    packed, state = F.quantize_4bit(W, quant_type="nf4")
    W_back = F.dequantize_4bit(packed, state)
    A = torch.randn(2, 64)
    want = (A.double() @ W_back.double().t()).float()
    for code in (torch.full((16,), float("nan")), F.get_4bit_type("fp4")):
        state.code = code
        with torch.no_grad():
            torch.testing.assert_close(bnb.matmul_4bit(A[:1], packed, state), want[:1])
            torch.testing.assert_close(bnb.matmul_4bit(A, packed, state), want)


@pytest.mark.parametrize("bad", ["nan", "fp4", "float64", "scaled"])
def test_a_quant_map_other_than_the_quant_type_s_table_is_refused_on_load(bad):
    src = bnb.nn.LinearNF4(64, 32).to("cpu")
    sd = src.state_dict()
    sd["weight.quant_map"] = {"nan": torch.full((16,), float("nan")), "fp4": F.get_4bit_type("fp4"),
                              "float64": F.get_4bit_type("nf4").double(),
                              "scaled": F.get_4bit_type("nf4") * 2}[bad]
    dst = bnb.nn.LinearNF4(64, 32)
    want = "expected float32, got float64" if bad == "float64" else r"expected nf4's 16 values \[-1.0, -0.69"
    with pytest.raises(RuntimeError, match=r"while loading weight\.quant_map: " + want):
        dst.load_state_dict(sd)
    assert not dst.weight.bnb_quantized
    stats = {k.removeprefix("weight."): v for k, v in sd.items() if k.startswith("weight.")}
    with pytest.raises(ValueError, match=r"Params4bit.from_prequantized: quant_map: " + want):
        bnb.nn.Params4bit.from_prequantized(sd["weight"], stats)
    with pytest.raises(ValueError, match=r"QuantState.from_dict: quant_map: " + want):
        bnb.QuantState.from_dict(stats, device="cpu")


def test_bitsandbytes_fp4_table_with_a_positive_zero_loads():
    # bitsandbytes writes FP4's "-0" as 0.0; the values are equal, so its checkpoints load.
    src = bnb.nn.LinearFP4(64, 32).to("cpu")
    sd = src.state_dict()
    table = sd["weight.quant_map"].clone()
    table[8] = 0.0
    sd["weight.quant_map"] = table
    dst = bnb.nn.LinearFP4(64, 32)
    dst.load_state_dict(sd)
    x = torch.randn(3, 64)
    assert_same_bits(dst(x), src(x))


# Each: (what to change in the metadata of a nested NF4 weight, or a tensor of its state dict; what the error says).
_BAD_METADATA = [
    ({"quant_type": [0, 5]}, r'quant_state.bitsandbytes__nf4\["quant_type"\]: is \[0, 5\], but the key names \'nf4\''),
    ({"quant_type": "fp4"}, r"is 'fp4', but the key names 'nf4'"),
    ({"blocksize": 0}, r'\["blocksize"\]: expected one of \(32, .*4096\), got 0'),
    ({"blocksize": 48}, r"got 48"),
    ({"blocksize": "64"}, r"got '64'"),
    ({"blocksize": True}, r"got True"),
    ({"dtype": "float64"}, r'\["dtype"\]: expected one of \(\'float32\', \'float16\', \'bfloat16\'\), got \'float64\''),
    ({"dtype": "Tensor"}, r"got 'Tensor'"),
    ({"dtype": 7}, r"got 7"),
    ({"shape": [32, -64]}, r'\["shape"\]: expected a list of sizes > 0, got \[32, -64\]'),
    ({"shape": "32x64"}, r"got '32x64'"),
    ({"shape": None}, r"a 4-bit state needs its weight's shape, got None"),
    ({"shape": [32.0, 64]}, r"got \[32.0, 64\]"),
    ({"nested_blocksize": 0}, r'\["nested_blocksize"\]: expected one of .*got 0'),
    ({"nested_dtype": "float16"}, r'\["nested_dtype"\]: expected \'float32\''),
    ({"nested_offset": "0.5"}, r'\["nested_offset"\]: expected a finite number, got \'0.5\''),
    ({"nested_offset": float("nan")}, r"expected a finite number, got nan"),
    ({"nested_offset": None}, r"expected a finite number, got None"),
    ({"blocksize": None, "dtype": None}, r'\["blocksize"\]: expected .*\n.*\["dtype"\]: expected'),  # all, listed
    ({"absmax": 1}, r'\["absmax"\]: a tensor\'s key in the metadata'),
    ({"colour": "red"}, r'\["colour"\]: unknown keys'),
    ("drop blocksize", r'\["blocksize"\]: missing'),
    ([1, 2], r"metadata is unreadable: expected a JSON object, got list"),
    (5, r"expected a JSON object, got int"),
    (None, r"expected a JSON object, got NoneType"),
    ("[" * 100000, r"metadata is unreadable: JSON nested too deeply"),
    (b"\xff", r"metadata is unreadable: not UTF-8 JSON"),
    (torch.tensor([123, 125]), r"metadata is unreadable: expected the bytes of UTF-8 JSON as a uint8 tensor, got a "
                               r"int64 tensor"),
]
_BAD_TENSORS = [
    ("weight.absmax", lambda t: t.float(), r"weight\.absmax: expected uint8, got float32"),
    ("weight.nested_absmax", lambda t: t.double(), r"weight\.nested_absmax: expected float32, got float64"),
    ("weight.nested_quant_map", lambda t: torch.where(torch.arange(256) == 3, float("inf"), t),
     r"weight\.nested_quant_map: every code value must be finite"),
    ("weight.nested_quant_map", lambda t: t[:255], r"weight\.nested_quant_map: expected 256 values, got 255"),
    ("weight", lambda t: t.reshape(-1).view(torch.int32),
     r"weight: holds int32 values; packed codes are stored as one of"),
    ("weight.absmax", lambda t: 5, r'While copying the parameter named "weight\.absmax", expected torch\.Tensor'),
]


def _bad_checkpoint(change):
    src = bnb.nn.LinearNF4(64, 32).to("cpu")  # nested (compress_statistics) by default
    sd = src.state_dict()
    if isinstance(change, dict):
        return _with_meta(sd, dict(_meta_of(sd), **change))
    if change == "drop blocksize":
        meta = _meta_of(sd)
        del meta["blocksize"]
        return _with_meta(sd, meta)
    if isinstance(change, torch.Tensor):
        return dict(sd, **{"weight.quant_state.bitsandbytes__nf4": change})
    raw = change if isinstance(change, bytes) else (change.encode() if isinstance(change, str) else
                                                     json.dumps(change).encode())
    return dict(sd, **{"weight.quant_state.bitsandbytes__nf4": torch.tensor(list(raw), dtype=torch.uint8)})


@pytest.mark.parametrize("change, message", _BAD_METADATA + [((k, f), m) for k, f, m in _BAD_TENSORS])
def test_every_field_of_a_checkpoint_s_state_is_checked_on_load(change, message):
    # Each went in and failed later (ZeroDivisionError, a 3-D output), or raised TypeError / AttributeError out of
    # load_state_dict. Now each is in torch's error list: one RuntimeError naming them, strict or not.
    if isinstance(change, tuple):
        key, f = change
        sd = bnb.nn.LinearNF4(64, 32).to("cpu").state_dict()
        sd[key] = f(sd[key])
    else:
        sd = _bad_checkpoint(change)
    for strict in (True, False):
        dst = bnb.nn.LinearNF4(64, 32)
        with pytest.raises(RuntimeError, match=r"Error\(s\) in loading state_dict for LinearNF4:\n\t(.|\n)*"
                                               + message):
            dst.load_state_dict(sd, strict=strict)
        assert not dst.weight.bnb_quantized and dst.quant_state is None  # left as it was


@pytest.mark.parametrize("absmax_dtype", [torch.float64, torch.int32, torch.float16])
def test_embedding4bit_refuses_an_absmax_that_is_not_float32(absmax_dtype):
    src = bnb.nn.EmbeddingNF4(20, 64).to("cpu")
    sd = src.state_dict()
    sd["weight.absmax"] = sd["weight.absmax"].to(absmax_dtype)
    with pytest.raises(RuntimeError, match=rf"while loading weight\.absmax: expected float32, got "
                                           rf"{str(absmax_dtype).removeprefix('torch.')}"):
        bnb.nn.EmbeddingNF4(20, 64).load_state_dict(sd)


def test_from_dict_checks_an_unpacked_8bit_state_too():
    _, state = F.quantize_blockwise(torch.randn(300), blocksize=64, nested=True)
    d = state.as_dict()
    assert bnb.QuantState.from_dict(d, device="cpu") == state
    for change, message in (({"blocksize": 0}, r"blocksize: expected one of .*got 0"),
                            ({"quant_type": "nf5"}, r"quant_type: expected 'nf4', 'fp4' or \(an 8-bit state\) None"),
                            ({"quant_map": d["quant_map"][:16]}, r"quant_map: expected 256 values, got 16"),
                            ({"quant_map": torch.full((256,), float("nan"))}, r"quant_map: every code value must be "
                                                                              r"finite"),
                            ({"absmax": d["absmax"].float()}, r"absmax: expected uint8, got float32"),
                            ({"nested_offset": torch.tensor(1.0)}, r"nested_offset: expected a finite number")):
        with pytest.raises(ValueError, match=r"QuantState.from_dict: " + message):
            bnb.QuantState.from_dict(dict(d, **change), device="cpu")
    with pytest.raises(ValueError, match=r"from_prequantized: quant_type: expected 'nf4' or 'fp4' \(a 4-bit state\)"):
        bnb.nn.Params4bit.from_prequantized(torch.zeros(150, dtype=torch.uint8), d)


def test_a_meta_checkpoint_loads_with_assign_as_torch_s_parameters_do():
    # The weight became the meta codes through .data of a CPU parameter, which torch refuses ("incompatible tensor
    # type"); it is made over the codes now, as torch's assign=True takes a meta tensor for a plain parameter.
    src = bnb.nn.LinearNF4(64, 32).to("cpu")
    sd = {k: v if "quant_state" in k else v.to("meta") for k, v in src.state_dict().items()}  # metadata is read
    dst = bnb.nn.LinearNF4(64, 32)
    dst.load_state_dict(sd, assign=True)
    assert type(dst.weight) is bnb.nn.Params4bit and dst.weight.device.type == "meta"
    assert dst.quant_state is dst.weight.quant_state and dst.quant_state.absmax.device.type == "meta"
    with pytest.raises(RuntimeError, match="is on meta but A is on cpu"):
        dst(torch.randn(2, 64))
    stats = {k.removeprefix("weight."): v for k, v in src.state_dict().items() if k.startswith("weight.")}
    w = bnb.nn.Params4bit.from_prequantized(src.weight.data, stats, device="meta")
    assert w.device.type == "meta" and w.quant_state.absmax.device.type == "meta"
    # Without assign the codes are copied, which a meta tensor cannot be: torch's error list, as for its parameters.
    for target in (bnb.nn.LinearNF4(64, 32), bnb.nn.LinearNF4(64, 32).to("cpu")):
        with pytest.raises(RuntimeError, match=r'Error\(s\) in loading state_dict(.|\n)*While copying the parameter '
                                               r'named "weight" and its quant state to cpu'):
            target.load_state_dict(sd)
    with pytest.raises(ValueError, match=r"absmax: a meta tensor has no values to load onto cpu"):
        bnb.QuantState.from_dict({k: v.to("meta") for k, v in stats.items() if "quant_state" not in k}
                                 | {k: v for k, v in stats.items() if "quant_state" in k}, device="cpu")
