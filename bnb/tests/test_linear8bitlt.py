"""bnb.nn's LLM.int8() modules: Int8Params quantizes on move, Linear8bitLt (thresholds 0 and 6, has_fp16_weights
True and False) within bitsandbytes' error bounds (its tests/test_linear8bitlt.py and tests/test_modules.py),
gradients, state dicts with bitsandbytes' keys (round trips, a checkpoint written by hand as bitsandbytes writes it,
bad checkpoints reported on load), torch.compile, Embedding8bit, StableEmbedding and OutlierAwareLinear."""

import copy
import io
import pickle
import re

import pytest
import torch

import bnb
from bnb.nn import Embedding8bit, Int8Params, Linear8bitLt
from bnb.reference import int8 as ref
from helpers import assert_same_bits


def dense_and_int8(n_in=64, n_out=48, threshold=0.0, has_fp16_weights=False, bias=True, seed=0):
    torch.manual_seed(seed)
    dense = torch.nn.Linear(n_in, n_out, bias=bias)
    layer = Linear8bitLt(n_in, n_out, bias=bias, has_fp16_weights=has_fp16_weights, threshold=threshold)
    layer.load_state_dict(dense.state_dict())
    return dense, layer


def reference_output(dense, x, threshold):
    """The layer's output by the definition: the dense weight quantized row-wise, x quantized with the threshold,
    int8_scaled_mm or int8_mixed_scaled_mm with the bias."""
    CB, SCB, _ = ref.int8_vectorwise_quant(dense.weight.detach(), 0.0)
    CA, SCA, cols = ref.int8_vectorwise_quant(x, threshold)
    bias = None if dense.bias is None else dense.bias.detach()
    if cols is None:
        return ref.int8_scaled_mm(CA, CB, SCA, SCB, bias, x.dtype)
    return ref.int8_mixed_scaled_mm(x, CA, CB, SCA, SCB, cols, bias)[0]


def save_load(obj, weights_only=False):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=weights_only)


# ---------------------------------------------------------------------------------------------------------------
# Quantization on move, and the forward

def test_quantization_happens_on_move():
    dense, layer = dense_and_int8()
    assert isinstance(layer.weight, Int8Params) and layer.weight.dtype == torch.float32 and layer.weight.SCB is None
    w = layer.weight
    layer = layer.to("cpu")
    assert layer.weight is w and w.dtype == torch.int8 and w.shape == (48, 64) and not w.requires_grad
    CB, SCB, _ = ref.int8_vectorwise_quant(dense.weight.detach(), 0.0)
    assert_same_bits(w.data, CB)
    assert_same_bits(w.SCB, SCB)
    assert w.CB.data_ptr() == w.data_ptr()
    layer.cpu()  # a second move keeps the codes
    assert_same_bits(layer.weight.data, CB)
    layer.half()  # module conversions convert floats only: the codes stay, the bias converts
    assert layer.weight.dtype == torch.int8 and layer.bias.dtype == torch.float16
    assert layer.weight.to(torch.float16).dtype == torch.int8  # Int8Params.to(dtype) keeps codes codes
    fp16 = Linear8bitLt(64, 48, has_fp16_weights=True).to("cpu")
    assert fp16.weight.dtype == torch.float32 and fp16.weight.requires_grad  # trainable, never quantized


def test_a_weight_is_quantized_in_its_own_dtype():
    # bitsandbytes casts to float16 first; a bfloat16 weight's codes are those of its own values here.
    W = torch.randn(16, 32).bfloat16() * 1000
    p = Int8Params(W.clone(), requires_grad=False).to("cpu")
    CB, SCB, _ = ref.int8_vectorwise_quant(W, 0.0)
    assert_same_bits(p.data, CB)
    assert_same_bits(p.SCB, SCB)
    with pytest.raises(RuntimeError, match=re.escape("Int8Params: cannot quantize a float64 weight of shape [2, 3]; "
                                                     "expected float32, float16 or bfloat16")):
        Int8Params(torch.ones(2, 3, dtype=torch.float64), requires_grad=False).to("cpu")


@pytest.mark.parametrize("threshold", [0.0, 6.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 64), (2, 3, 64)])
def test_forward_is_the_definition(threshold, dtype, shape):
    dense, layer = dense_and_int8(threshold=threshold)
    layer = layer.to("cpu")
    x = (torch.randn(*shape) * 3).to(dtype)
    x[..., 7] = 9.0  # an outlier column at threshold 6
    y = layer(x)
    assert y.dtype == dtype and y.shape == (*shape[:-1], 48)
    assert_same_bits(y, reference_output(dense, x, threshold))
    assert layer.bias.dtype == torch.float32  # bitsandbytes converts the bias to the input's dtype; bnb leaves it
    if threshold:
        assert 7 in layer.state.idx.tolist()
    assert layer.state.CB is layer.weight and layer.state.SCB is layer.weight.SCB


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("threshold", [0.0, 6.0])
def test_device_movement_keeps_codes_and_scales_together(threshold):
    # bitsandbytes' test_linear8bitlt_device_movement, against the definition on the CPU.
    dense, layer = dense_and_int8(threshold=threshold)
    x = (torch.randn(4, 64) * 3).half()
    want = reference_output(dense, x, threshold)
    for device in ("cuda", "cpu", "cuda", "cpu"):
        layer = layer.to(device)
        w = layer.weight
        assert w.dtype == torch.int8 and w.device.type == device and w.SCB.device.type == device
        xd = x.to(device).requires_grad_(True)
        y = layer(xd)
        assert layer.state.SCB.device.type == device
        # Bit for bit at threshold 0; the outlier columns' float16 product may sum in another order on a GPU.
        torch.testing.assert_close(y.cpu(), want, atol=0 if threshold == 0 else 2e-3, rtol=0)
        y.float().sum().backward()
        W = ref.int8_vectorwise_dequant(*ref.int8_vectorwise_quant(dense.weight.detach(), 0.0)[:2])
        torch.testing.assert_close(xd.grad.cpu().float(), W.sum(0).expand(4, 64), atol=2e-3, rtol=2e-3)


def test_a_module_never_moved_is_quantized_at_its_first_call():
    dense, layer = dense_and_int8()
    x = torch.randn(3, 64)
    assert_same_bits(layer(x), reference_output(dense, x, 0.0))
    assert layer.weight.dtype == torch.int8


# bitsandbytes' test_linear_no_igemmlt: Linear(1024, 3072) against the float16 dense layer, threshold 6.0; at most
# 2.5e-4 of the outputs off by more than 0.02, none by more than 0.03, and the input's gradient within 0.01.
@pytest.mark.parametrize("threshold", [0.0, 6.0])
def test_a_parametrized_weight_and_bias_are_used(threshold):
    # forward reads the parameters from the module's dict; torch.nn.utils.parametrize moves them out of it and makes
    # them properties, which forward must still call (a scaled bias here shows that it does).
    from torch.nn.utils import parametrize

    class Twice(torch.nn.Module):
        def forward(self, t):
            return t * 2

    torch.manual_seed(0)
    layer = Linear8bitLt(64, 32, has_fp16_weights=False, threshold=threshold).to("cpu")
    x = torch.randn(3, 64)
    x[:, 5] = 9.0
    with torch.no_grad():
        layer.bias.mul_(2)  # exact: the output with the bias the parametrization will give
        want = layer(x)
        layer.bias.div_(2)
    parametrize.register_parametrization(layer, "bias", Twice())
    assert "bias" not in layer._parameters
    assert_same_bits(layer(x), want)
    parametrize.register_parametrization(layer, "weight", torch.nn.Identity())
    assert "weight" not in layer._parameters
    assert_same_bits(layer(x), want)


def test_large_layer_meets_bitsandbytes_bounds():
    torch.manual_seed(1)
    linear = torch.nn.Linear(1024, 3072)
    x = torch.randn(3, 1024, dtype=torch.half)
    layer = Linear8bitLt(1024, 3072, has_fp16_weights=False, threshold=6.0)
    layer.weight = Int8Params(linear.weight.data.clone(), requires_grad=False, has_fp16_weights=False)
    layer.bias = linear.bias
    layer = layer.to("cpu")
    linear = linear.half()
    x_ref, x_ours = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    fx_ref = linear(x_ref).float()
    grad_proj = torch.randn_like(fx_ref)
    (fx_ref * grad_proj).mean().backward()
    fx_ours = layer(x_ours).float()
    (fx_ours * grad_proj).mean().backward()
    assert layer.state.CB is not None and not layer.state.has_fp16_weights
    assert (~torch.isclose(fx_ref, fx_ours, atol=0.02, rtol=1e-5)).sum().item() < fx_ref.numel() * 2.5e-4
    torch.testing.assert_close(fx_ref, fx_ours, atol=0.03, rtol=1e-5)
    torch.testing.assert_close(x_ref.grad, x_ours.grad, atol=0.01, rtol=1e-5)


class MLP8bit(torch.nn.Module):
    def __init__(self, dim1, dim2, has_fp16_weights=True, threshold=0.0):
        super().__init__()
        self.fc1 = Linear8bitLt(dim1, dim2, has_fp16_weights=has_fp16_weights, threshold=threshold)
        self.fc2 = Linear8bitLt(dim2, dim1, has_fp16_weights=has_fp16_weights, threshold=threshold)

    def forward(self, x):
        return self.fc2(self.fc1(x))


# bitsandbytes' test_linear8bitlt_no_fp16_weights: every order of .to(device) and .half() quantizes, float16 in and
# out, outlier columns recorded; the input's gradient through two layers within 5% of its mean of the float
# product's (and at most 0.5% of its elements beyond 1% + 10%).
@pytest.mark.parametrize("threshold", [0.0, 2.0])
def test_mlp_meets_bitsandbytes_bounds(threshold):
    torch.manual_seed(2)
    for make in (lambda m: m.to("cpu"), lambda m: m.to("cpu").half(), lambda m: m.half().to("cpu")):
        mlp = make(MLP8bit(32, 64, threshold=threshold, has_fp16_weights=False))
        assert mlp.fc1.weight.dtype == torch.int8 and mlp.fc2.weight.dtype == torch.int8
        for _ in range(4):
            out = mlp(torch.randn(16, 8, 32, dtype=torch.float16))
            assert out.dtype == torch.float16
            if threshold:
                assert mlp.fc1.state.idx is not None and mlp.fc2.state.idx is not None
    mlp = MLP8bit(32, 64, threshold=threshold, has_fp16_weights=False)
    w1, w2 = mlp.fc1.weight.detach().clone(), mlp.fc2.weight.detach().clone()
    mlp = mlp.to("cpu").half()
    b1 = torch.randn(16, 8, 32, requires_grad=True, dtype=torch.half)
    o1 = mlp(b1)
    assert o1.dtype == torch.float16 and o1.requires_grad
    grad_proj = torch.randn_like(o1)
    (o1 * grad_proj).sum().backward()
    grad_ref = grad_proj.flatten(2) @ w2.half() @ w1.half()
    scale = grad_ref.abs().mean()
    torch.testing.assert_close(b1.grad, grad_ref, rtol=0, atol=0.05 * scale)
    assert (~torch.isclose(b1.grad, grad_ref, atol=0.01 * scale, rtol=0.1)).sum().item() <= b1.numel() * 0.005


# bitsandbytes' test_kbit_backprop (Int8Lt): Linear -> Linear8bitLt (has_fp16_weights=True by default, its weight
# frozen); the first layer's weight and bias gradients within atol 0.008, rtol 0.05 of the float model's.
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_backprop_through_a_frozen_int8_layer_meets_bitsandbytes_bounds(dtype):
    torch.manual_seed(3)
    ref_net = torch.nn.Sequential(torch.nn.Linear(36, 84), torch.nn.Linear(84, 128))
    torch.nn.init.kaiming_normal_(ref_net[0].weight)
    torch.nn.init.kaiming_normal_(ref_net[1].weight)
    ref_net[1].weight.requires_grad_(False)
    net = torch.nn.Sequential(torch.nn.Linear(36, 84), Linear8bitLt(84, 128))
    net.load_state_dict(ref_net.state_dict())
    net[1].weight.requires_grad_(False)
    ref_net, net = ref_net.to("cpu", dtype), net.to("cpu", dtype)
    for _ in range(20):
        batch = torch.randn(16, 36, dtype=dtype)
        ref_net(batch).mean().backward()
        net(batch).mean().backward()
        g1, g2 = ref_net[0].weight.grad, net[0].weight.grad
        assert (~torch.isclose(g1, g2, atol=0.008, rtol=0.05)).sum().item() <= 1
        torch.testing.assert_close(ref_net[0].bias.grad, net[0].bias.grad, atol=0.008, rtol=0.05)
        ref_net.zero_grad()
        net.zero_grad()


def test_fp16_weights_train_and_eval_sees_the_trained_weight():
    dense, layer = dense_and_int8(has_fp16_weights=True, threshold=6.0)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    x = torch.randn(8, 64) * 3
    layer(x).square().mean().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0 and layer.bias.grad is not None
    opt.step()
    layer.eval()  # bitsandbytes would multiply by the codes of the weight before the step here
    moved = torch.nn.Linear(64, 48)
    moved.load_state_dict({"weight": layer.weight.detach(), "bias": layer.bias.detach()})
    with torch.no_grad():
        assert_same_bits(layer(x), reference_output(moved, x, 6.0))


def test_bad_input_gives_a_clear_error():
    _, layer = dense_and_int8()
    layer = layer.to("cpu")
    with pytest.raises(RuntimeError, match=re.escape("Linear8bitLt: input has 63 features (shape [2, 63]), the "
                                                     "layer takes 64")):
        layer(torch.randn(2, 63))
    with pytest.raises(RuntimeError, match="bnb.matmul: A must be float32, float16 or bfloat16, got int64"):
        layer(torch.ones(2, 64, dtype=torch.long))
    layer.weight.SCB = layer.state.SCB = None
    with pytest.raises(RuntimeError, match=re.escape("the weight holds int8 codes without their row scales")):
        layer(torch.randn(2, 64))


# ---------------------------------------------------------------------------------------------------------------
# torch.compile

@pytest.mark.parametrize("threshold", [0.0, 6.0])
@pytest.mark.parametrize("bias", [True, False])
def test_compiled_model_equals_eager(threshold, bias):
    # bitsandbytes' test_linear8bitlt_torch_compile: 4 layers of 256, batch 16, float16; without graph breaks.
    torch.manual_seed(4)
    torch.compiler.reset()
    net = torch.nn.Sequential(*[Linear8bitLt(256, 256, bias=bias, has_fp16_weights=False, threshold=threshold)
                                for _ in range(4)]).to("cpu")
    x = torch.randn(16, 256, dtype=torch.float16) * 3
    compiled = torch.compile(net, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert_same_bits(compiled(x), net(x))
    x.requires_grad_(True)
    net(x).sum().backward()
    eager_grad, x.grad = x.grad, None
    compiled(x).sum().backward()
    assert_same_bits(x.grad, eager_grad)


def test_compiled_model_with_inductor_equals_eager():
    torch.manual_seed(5)
    torch.compiler.reset()
    net = torch.nn.Sequential(*[Linear8bitLt(128, 128, has_fp16_weights=False, threshold=6.0) for _ in range(2)])
    net = net.to("cpu")
    x = torch.randn(8, 128, dtype=torch.float16) * 3
    with torch.no_grad():
        assert_same_bits(torch.compile(net, fullgraph=True)(x), net(x))


# ---------------------------------------------------------------------------------------------------------------
# State dicts

@pytest.mark.parametrize("threshold", [0.0, 6.0])
@pytest.mark.parametrize("serialize_before_forward", [True, False])
@pytest.mark.parametrize("deserialize_before_move", [True, False])
@pytest.mark.parametrize("save_before_forward", [True, False])
@pytest.mark.parametrize("load_before_move", [True, False])
def test_serialization_as_bitsandbytes_tests_it(threshold, serialize_before_forward, deserialize_before_move,
                                                save_before_forward, load_before_move):
    # bitsandbytes' test_linear_serialization (has_fp16_weights=False). Loading before the move raises there; here it
    # loads the quantized weight, and the results equal the first module's.
    torch.manual_seed(6)
    linear = torch.nn.Linear(32, 96)
    x = torch.randn(4, 32, dtype=torch.half)
    layer = Linear8bitLt(32, 96, has_fp16_weights=False, threshold=threshold)
    layer.weight = Int8Params(linear.weight.data.clone(), requires_grad=False, has_fp16_weights=False)
    layer.bias = linear.bias
    layer = layer.to("cpu")
    if serialize_before_forward:
        sd = layer.state_dict()
    if save_before_forward:
        saved = io.BytesIO()
        torch.save(layer, saved)
    x1 = x.clone().requires_grad_(True)
    fx1 = layer(x1).float()
    grad_proj = torch.randn_like(fx1)
    (fx1 * grad_proj).mean().backward()
    if not serialize_before_forward:
        sd = layer.state_dict()
    if not save_before_forward:
        saved = io.BytesIO()
        torch.save(layer, saved)
    dense_bytes, int8_bytes = io.BytesIO(), io.BytesIO()
    torch.save(linear.state_dict(), dense_bytes)
    torch.save(sd, int8_bytes)
    assert len(int8_bytes.getvalue()) < 0.5 * len(dense_bytes.getvalue())
    int8_bytes.seek(0)
    sd = torch.load(int8_bytes, weights_only=True)  # plain tensors only

    fresh = Linear8bitLt(32, 96, has_fp16_weights=False, threshold=threshold)
    if deserialize_before_move:
        fresh.load_state_dict(sd, strict=True)
    if load_before_move:
        saved.seek(0)
        unpickled = torch.load(saved, weights_only=False)
    fresh = fresh.to("cpu")
    if not deserialize_before_move:
        fresh.load_state_dict(sd, strict=True)
    if not load_before_move:
        saved.seek(0)
        unpickled = torch.load(saved, weights_only=False)
    for other in (fresh, unpickled):
        x2 = x.clone().requires_grad_(True)
        fx2 = other(x2).float()
        (fx2 * grad_proj).mean().backward()
        assert_same_bits(fx2, fx1)
        assert_same_bits(x2.grad, x1.grad)


def test_state_dict_has_bitsandbytes_keys_and_dtypes():
    dense, layer = dense_and_int8()
    assert set(layer.state_dict()) == {"weight", "bias"}  # not quantized yet: a dense state dict
    layer = layer.to("cpu")
    sd = layer.state_dict()
    assert set(sd) == {"weight", "bias", "SCB", "weight_format"}
    assert sd["weight"].dtype == torch.int8 and sd["weight"].shape == (48, 64)
    assert sd["SCB"].dtype == torch.float32 and sd["SCB"].shape == (48,)
    assert sd["weight_format"].dtype == torch.uint8 and sd["weight_format"].shape == () and sd["weight_format"] == 0
    assert type(sd["weight"]) is torch.Tensor and type(sd["SCB"]) is torch.Tensor
    fp16 = Linear8bitLt(64, 48, has_fp16_weights=True).to("cpu")
    assert set(fp16.state_dict()) == {"weight", "bias"}


def bitsandbytes_checkpoint(dense, fmt=torch.tensor(0, dtype=torch.uint8)):
    """A Linear8bitLt state dict as bitsandbytes 0.50 writes it, built by hand: the weight's row-wise int8 codes, SCB
    their float32 row absmax, weight_format a uint8 0 ("row")."""
    W = dense.weight.detach()
    absmax = W.abs().amax(dim=1)
    codes = torch.round(W * (127 / absmax[:, None])).to(torch.int8)
    sd = {"weight": codes, "SCB": absmax.float(), "bias": dense.bias.detach().clone()}
    if fmt is not None:
        sd["weight_format"] = fmt
    return sd


@pytest.mark.parametrize("fmt", [torch.tensor(0, dtype=torch.uint8), 0, "row", None])
@pytest.mark.parametrize("move_first", [True, False])
def test_loads_a_bitsandbytes_checkpoint(fmt, move_first):
    dense, _ = dense_and_int8(seed=7)
    sd = bitsandbytes_checkpoint(dense, fmt)
    layer = Linear8bitLt(64, 48, has_fp16_weights=False, threshold=6.0)
    if move_first:
        layer = layer.to("cpu")
    assert str(layer.load_state_dict(sd, strict=True)) == "<All keys matched successfully>"
    layer = layer.to("cpu")
    assert torch.equal(layer.weight.data, sd["weight"]) and torch.equal(layer.weight.SCB, sd["SCB"])
    x = torch.randn(4, 64) * 3
    # Against a float64 product of the checkpoint's own codes and scales.
    CA, SCA, cols = ref.int8_vectorwise_quant(x, 6.0)
    Wd = sd["weight"].double() * sd["SCB"].double()[:, None] / 127
    want = CA.double() @ sd["weight"].double().t() * SCA.double()[:, None] * sd["SCB"].double() * ref.INV_127_SQUARED
    want += x.double()[:, cols] @ Wd[:, cols].t() + sd["bias"].double()
    torch.testing.assert_close(layer(x).double(), want, atol=1e-4, rtol=0)
    # What bnb saves, bitsandbytes reads: its keys, dtypes and shapes, and the values loaded.
    out = layer.state_dict()
    assert set(out) == {"weight", "bias", "SCB", "weight_format"}
    for k in ("weight", "SCB", "bias"):
        assert_same_bits(out[k], sd[k])
    assert out["weight_format"].dtype == torch.uint8 and out["weight_format"].item() == 0


def test_load_keeps_the_parameter_object_and_assign_takes_the_tensors():
    dense, layer = dense_and_int8(seed=8)
    layer = layer.to("cpu")
    w = layer.weight
    sd = bitsandbytes_checkpoint(dense)
    layer.load_state_dict(sd)
    assert layer.weight is w and w.data_ptr() != sd["weight"].data_ptr() and torch.equal(w.data, sd["weight"])
    assigned = Linear8bitLt(64, 48, has_fp16_weights=False)
    assigned.load_state_dict(sd, assign=True)
    assert isinstance(assigned.weight, Int8Params) and assigned.weight.data_ptr() == sd["weight"].data_ptr()
    assert assigned.weight.SCB.data_ptr() == sd["SCB"].data_ptr()
    x = torch.randn(3, 64)
    assert_same_bits(assigned(x), layer(x))


def test_a_float_checkpoint_into_a_quantized_module_is_quantized():
    # bitsandbytes copies the floats into the int8 codes (truncating them).
    dense, layer = dense_and_int8(seed=9)
    layer = layer.to("cpu")
    other = torch.nn.Linear(64, 48)
    layer.load_state_dict(other.state_dict())
    CB, SCB, _ = ref.int8_vectorwise_quant(other.weight.detach(), 0.0)
    assert_same_bits(layer.weight.data, CB)
    assert_same_bits(layer.weight.SCB, SCB)


def test_a_partial_state_dict_updates_a_quantized_module():
    # Shards may split a weight from its SCB: each loads into a module that holds the other.
    dense, layer = dense_and_int8(seed=10)
    layer = layer.to("cpu")
    sd = bitsandbytes_checkpoint(torch.nn.Linear(64, 48))
    layer.load_state_dict({"SCB": sd["SCB"]}, strict=False)
    assert torch.equal(layer.weight.SCB, sd["SCB"])
    layer.load_state_dict({"weight": sd["weight"]}, strict=False)
    assert torch.equal(layer.weight.data, sd["weight"])
    # Strictly, each lacks the other (a truncated checkpoint is no shard).
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "SCB"'):
        layer.load_state_dict({"weight": sd["weight"], "bias": sd["bias"]})
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "weight"'):
        layer.load_state_dict({"SCB": sd["SCB"], "bias": sd["bias"]})


def checkpoint_error(sd, layer=None, **kw):
    layer = Linear8bitLt(64, 48, has_fp16_weights=False) if layer is None else layer
    before = (layer.weight.detach().clone(), getattr(layer.weight, "SCB", None))
    with pytest.raises(RuntimeError) as info:
        layer.load_state_dict(sd, **kw)
    assert torch.equal(layer.weight.detach(), before[0]) and layer.weight.SCB is before[1]  # left as it was
    return str(info.value)


def good():
    return bitsandbytes_checkpoint(torch.nn.Linear(64, 48))


@pytest.mark.parametrize("change, message", [
    (lambda sd: sd.update(SCB=sd["SCB"][:47]), "while loading SCB: expected 48 row scales (one per row of the "
                                               "weight), got 47 (shape [47])"),
    (lambda sd: sd.update(SCB=sd["SCB"].int()), "while loading SCB: expected float32 row scales, got int32"),
    (lambda sd: sd["SCB"].__setitem__(3, -1.0), "while loading SCB: a row scale is negative"),
    (lambda sd: sd.update(SCB=[1.0] * 48), 'While copying the parameter named "SCB", expected torch.Tensor'),
    (lambda sd: sd.update(weight=sd["weight"][:, :63]), "size mismatch for weight: copying a param with shape "
                                                        "(48, 63) from checkpoint, the shape in current model is "
                                                        "(48, 64)."),
    (lambda sd: sd.update(weight=sd["weight"].short()), "while loading weight: expected int8 codes or a "
                                                        "float32/float16/bfloat16 weight, got int16"),
    (lambda sd: sd.update(weight=sd["weight"].float()), "Loading a quantized checkpoint into non-quantized "
                                                        "Linear8bitLt: the checkpoint has row scales (SCB), but "
                                                        "weight is float32, not int8 codes"),
    (lambda sd: sd.update(weight_format=torch.tensor(2, dtype=torch.uint8)), "while loading weight_format: "
                                                                             "expected 0 ('row', row-major int8 "
                                                                             "codes), got tensor(2"),
    (lambda sd: sd.update(weight_format="col_ampere"), "expected 0 ('row', row-major int8 codes), got 'col_ampere'"),
    (lambda sd: sd.pop("SCB"), "while loading weight: the checkpoint holds int8 codes without SCB"),
    (lambda sd: sd.pop("weight"), "Loading a quantized checkpoint into non-quantized Linear8bitLt: SCB comes "
                                  "without the int8 codes of weight"),
])
def test_bad_checkpoints_are_reported_on_load(change, message):
    sd = good()
    change(sd)
    msg = checkpoint_error(sd, strict=False)  # errors, not missing or unexpected keys: strict=False reports them
    assert message in msg, msg


def test_a_quantized_checkpoint_into_fp16_weights_is_an_error():
    msg = checkpoint_error(good(), Linear8bitLt(64, 48, has_fp16_weights=True))
    assert "but this Linear8bitLt has has_fp16_weights=True, which keeps a float weight" in msg


def test_a_meta_checkpoint_loads_with_assign_only():
    sd = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in good().items()}
    msg = checkpoint_error(sd, Linear8bitLt(64, 48, has_fp16_weights=False).to("cpu"))
    assert 'While copying the parameter named "weight" and its SCB to cpu' in msg
    layer = Linear8bitLt(64, 48, has_fp16_weights=False, device="meta")
    layer.load_state_dict(sd, assign=True)
    assert layer.weight.device.type == "meta" and layer.weight.dtype == torch.int8


def test_tied_plain_weight_saves_no_scb_and_refuses_one():
    # bitsandbytes' test_linear8bit_state_dict_skips_scb_for_tied_weight and ..._raises_runtime_for_tied_weight.
    layer = Linear8bitLt(8, 8, bias=False, has_fp16_weights=False)
    layer.weight = torch.nn.Parameter(torch.randn_like(layer.weight))
    sd = layer.state_dict()
    assert "SCB" not in sd and "weight_format" not in sd
    sd["SCB"] = torch.ones(8)
    with pytest.raises(RuntimeError, match="Loading a quantized checkpoint into non-quantized Linear8bitLt"):
        layer.load_state_dict(sd, strict=False)


# ---------------------------------------------------------------------------------------------------------------
# Copies and pickling (bitsandbytes' test_linear8bit_copy_param / _deepcopy_param / _serialization)

@pytest.fixture
def linear8bit():
    linear = torch.nn.Linear(32, 96)
    layer = Linear8bitLt(32, 96, has_fp16_weights=False, threshold=6.0)
    layer.weight = Int8Params(linear.weight.data.clone(), requires_grad=False, has_fp16_weights=False)
    layer.bias = linear.bias
    return layer.to("cpu")


def test_copies_and_pickling(linear8bit):
    shallow = copy.copy(linear8bit)
    assert shallow.weight is linear8bit.weight and shallow.bias is linear8bit.bias
    copies = (copy.deepcopy(linear8bit), pickle.loads(pickle.dumps(linear8bit)), save_load(linear8bit))
    x = torch.randn(4, 32)
    for other in copies:
        assert other.state == linear8bit.state  # (before a call puts tensors into the states)
        assert isinstance(other.weight, Int8Params) and other.weight.data_ptr() != linear8bit.weight.data_ptr()
        assert torch.equal(other.weight.data, linear8bit.weight.data)
        assert torch.equal(other.weight.SCB, linear8bit.weight.SCB) and other.weight.CB.data_ptr() == \
            other.weight.data_ptr()
    for other in copies:
        assert_same_bits(other(x), linear8bit(x))


def test_unquantized_copies_still_quantize_on_move():
    dense, layer = dense_and_int8(seed=11)
    for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert other.weight.dtype == torch.float32
        other.to("cpu")
        assert other.weight.dtype == torch.int8 and other.weight.SCB is not None


def test_transformers_style_construction():
    # transformers builds Int8Params(codes, requires_grad=False, **old.__dict__), moves it and sets SCB.
    sd = good()
    old = Linear8bitLt(64, 48, has_fp16_weights=False).weight
    kwargs = dict(old.__dict__)
    scb = kwargs.pop("SCB", None)
    new = Int8Params(sd["weight"], requires_grad=False, **kwargs).to("cpu")
    new.SCB = sd["SCB"] if scb is None else scb
    assert new.dtype == torch.int8 and torch.equal(new.CB, sd["weight"])
    layer = Linear8bitLt(64, 48, has_fp16_weights=False)
    layer._parameters["weight"] = new
    x = torch.randn(2, 64)
    want = bnb.matmul(x, None, state=bnb.MatmulLtState(has_fp16_weights=False, CB=sd["weight"], SCB=sd["SCB"]),
                      bias=layer.bias.detach())
    assert_same_bits(layer(x), want)
    # peft's dequantize: int8_vectorwise_dequant of the weight with state.SCB (filled from the weight if None)
    torch.testing.assert_close(bnb.functional.int8_vectorwise_dequant(layer.weight.data, layer.state.SCB),
                               sd["weight"].float() * sd["SCB"][:, None] / 127)


# ---------------------------------------------------------------------------------------------------------------
# Embedding8bit, StableEmbedding, Embedding

@pytest.mark.parametrize("embedding_dim", [64, 65])
@pytest.mark.parametrize("input_shape", [(10,), (10, 10), (10, 10, 10)], ids=str)
def test_embedding8bit_as_bitsandbytes_tests_it(embedding_dim, input_shape):
    # bitsandbytes' test_embedding_lossless ({-1, 1} tables exactly) and test_embedding_error (atol 0.05).
    torch.manual_seed(12)
    for src, atol in (((torch.randn(128, embedding_dim) > 0).float() * 2 - 1, 0.0),
                      (torch.rand(128, embedding_dim), 0.05)):
        base = torch.nn.Embedding(128, embedding_dim, _freeze=True, _weight=src)
        emb = Embedding8bit(128, embedding_dim)
        emb.load_state_dict(base.state_dict())
        emb.to("cpu")
        tokens = torch.randint(0, 128, input_shape)
        torch.testing.assert_close(emb(tokens), base(tokens), atol=atol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_embedding8bit_rows_are_the_dequantized_table(dtype):
    emb = Embedding8bit(50, 24, dtype=dtype)
    table = emb.weight.detach().clone()
    emb.to("cpu")
    CB, SCB, _ = ref.int8_vectorwise_quant(table, 0.0)
    tokens = torch.tensor([[3, 49, 0], [3, 7, 7]])
    got = emb(tokens)
    assert got.dtype == dtype and got.shape == (2, 3, 24)
    assert_same_bits(got, ref.int8_vectorwise_dequant(CB, SCB)[tokens].to(dtype))
    assert emb(torch.empty(0, dtype=torch.long)).shape == (0, 24)
    with pytest.raises(IndexError):
        emb(torch.tensor([50]))
    # Saved and loaded with Linear8bitLt's keys (bitsandbytes cannot save it).
    sd = emb.state_dict()
    assert set(sd) == {"weight", "SCB", "weight_format"}
    other = Embedding8bit(50, 24, dtype=dtype)
    other.load_state_dict(sd)
    assert_same_bits(other(tokens), got)


def test_embedding8bit_not_quantized_says_what_to_do():
    with pytest.raises(RuntimeError, match=re.escape("Embedding8bit: the table is not quantized yet (or has no row "
                                                     "scales); move the module to a device first")):
        Embedding8bit(8, 4)(torch.tensor([1]))


def test_stable_embedding():
    torch.manual_seed(13)
    emb = bnb.nn.StableEmbedding(100, 32, padding_idx=0)
    emb.reset_parameters()
    assert (emb.weight[0] == 0).all()
    bound = (6 / (100 + 32)) ** 0.5  # Xavier-uniform
    assert emb.weight.abs().max() <= bound
    tokens = torch.tensor([[1, 2, 0], [5, 99, 3]])
    want = torch.nn.functional.layer_norm(emb.weight[tokens], (32,), emb.norm.weight, emb.norm.bias)
    torch.testing.assert_close(emb(tokens), want)
    half = bnb.nn.StableEmbedding(100, 32, dtype=torch.float16)
    out = half(tokens)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(half.weight[tokens].float(), (32,)).half())
    out.float().sum().backward()  # trains
    assert half.weight.grad is not None and half.norm.weight.grad is not None
    plain = bnb.nn.Embedding(100, 32)
    assert plain.weight.abs().max() <= bound and torch.equal(plain(tokens), plain.weight[tokens])


# ---------------------------------------------------------------------------------------------------------------
# OutlierAwareLinear and the outlier tracer

class ZeroOutliers(bnb.nn.OutlierAwareLinear):
    """Zeroes the weight's outlier columns; forward_with_outliers is the plain product."""

    def quantize_weight(self, w, outlier_idx):
        w = w.detach().clone()
        w[:, outlier_idx] = 0
        return w

    def forward_with_outliers(self, x, outlier_idx):
        return torch.nn.functional.linear(x, self.weight, self.bias)


def test_outlier_aware_linear_with_the_tracer():
    torch.manual_seed(14)
    model = torch.nn.Sequential(ZeroOutliers(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    x = torch.randn(32, 16)
    x[:, 5] = 10  # |x| > 6: an outlier dimension of the first layer's input
    tracer = bnb.utils.OutlierTracer.get_instance()
    tracer.initialize(model)
    model(x)  # the tracer's hooks record each Linear's outlier dimensions
    first = tracer.get_outliers(model[0].weight)
    assert 5 in first.tolist()
    expected = model[0].weight.detach().clone()
    expected[:, first] = 0
    y = model[0](x)  # the first call quantizes, and returns forward_with_outliers' result
    assert model[0].is_quantized and torch.equal(model[0].weight.detach(), expected)
    torch.testing.assert_close(y, x @ expected.t() + model[0].bias.detach())
    with pytest.raises(NotImplementedError, match="forward_with_outliers"):
        bnb.nn.OutlierAwareLinear(4, 4).forward_with_outliers(torch.ones(1, 4), None)


def test_find_outlier_dims():
    w = torch.randn(256, 64, generator=torch.Generator().manual_seed(15))
    w[:, 10] *= 40  # one column of unusual spread
    assert bnb.utils.find_outlier_dims(w).tolist() == [10]
    assert bnb.utils.find_outlier_dims(w, topk=1).tolist() == [10]
