"""bnb.nn.parametrize: 4-bit quantization of any parameter, as bitsandbytes' tests/test_parametrize.py checks it,
plus exact values against the reference kernels, checkpoints in and out, and bad checkpoints."""

import json

import pytest
import torch
import torch.nn.utils.parametrize as P
from torch import nn

import bnb
from bnb import functional as F
from bnb.nn.parametrize import Bnb4bitParametrization, replace_parameter_4bit, replace_parameter_4bit_prequantized
from bnb.reference import blockwise4 as ref
from helpers import FLOAT_DTYPES, assert_same_bits, devices

# bitsandbytes' bounds on the mean absolute and relative error of 4-bit quantization of randn (its
# test_functional), by quant_type and blocksize.
ERROR_BOUNDS = {
    "nf4": {64: (0.072792, 0.203299), 128: (0.076835, 0.215252), 256: (0.080326, 0.226044)},
    "fp4": {64: (0.096545, 0.260130), 128: (0.102947, 0.275734), 256: (0.108685, 0.289842)},
}


class Params(nn.Module):
    """Parameters of several shapes, as bitsandbytes' ParametrizeTestModule."""

    def __init__(self, device="cpu", dtype=torch.float32):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight_2d = nn.Parameter(torch.randn(1024, 1024, generator=g).to(device, dtype))
        self.expert_weights = nn.Parameter(torch.randn(8, 512, 256, generator=g).to(device, dtype))  # MoE experts
        self.bias_1d = nn.Parameter(torch.randn(1024, generator=g).to(device, dtype))
        self.not_param = torch.randn(32, generator=g).to(device, dtype)


@pytest.fixture(autouse=True)
def _seeded():
    # Fixed data: the error bounds below are bitsandbytes', met by typical draws, not by every one (a relative
    # error over outputs near zero is heavy-tailed).
    torch.manual_seed(0)


def errors(original, reconstructed):
    err = (original.float() - reconstructed.float()).abs()
    return err.mean().item(), (err / (original.float().abs() + 1e-8)).mean().item()


def reference_round_trip(x, blocksize, quant_type):
    """x through the reference kernels: what a parameter quantized without nested statistics reads as."""
    packed, absmax = ref.quantize_4bit(x.cpu(), blocksize, quant_type, torch.uint8)
    return ref.dequantize_4bit(packed, absmax, blocksize, quant_type, list(x.shape), x.dtype).to(x.device)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("compress_statistics", [False, True])
@pytest.mark.parametrize("blocksize", [64, 128, 256])
def test_replace_parameter_4bit(device, dtype, quant_type, compress_statistics, blocksize):
    module = Params(device, dtype)
    original = module.weight_2d.detach().clone()
    replace_parameter_4bit(module, "weight_2d", compress_statistics=compress_statistics, quant_type=quant_type,
                           blocksize=blocksize)
    assert P.is_parametrized(module, "weight_2d") and "weight_2d" in module.parametrizations
    packed = module.parametrizations.weight_2d.original
    assert packed.dtype == torch.uint8 and packed.shape == (1024 * 1024 // 2, 1) and not packed.requires_grad
    reconstructed = module.weight_2d
    assert reconstructed.shape == original.shape and reconstructed.dtype == dtype
    assert reconstructed.device.type == device
    if compress_statistics:
        abs_bound, rel_bound = ERROR_BOUNDS[quant_type][blocksize]
        abs_err, rel_err = errors(original, reconstructed)
        assert abs_err < abs_bound + 1e-3 and rel_err < rel_bound + 1e-3
    else:
        assert_same_bits(reconstructed, reference_round_trip(original, blocksize, quant_type))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_moe_parameter_keeps_its_3d_shape(dtype):
    module = nn.Module()
    module.param = nn.Parameter(torch.randn(8, 64, 32, dtype=dtype))
    original = module.param.detach().clone()
    replace_parameter_4bit(module, "param", quant_type="nf4")
    assert module.param.shape == (8, 64, 32) and module.param.dtype == dtype
    assert_same_bits(module.param, reference_round_trip(original, 64, "nf4"))
    abs_err, rel_err = errors(original, module.param)
    assert abs_err < 0.085 and rel_err < 0.25  # bitsandbytes' bounds for this shape


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_prequantized_replacement(dtype, quant_type):
    module = Params(dtype=dtype)
    original = module.weight_2d.detach().clone()
    packed, state = F.quantize_4bit(original, quant_type=quant_type)
    module.weight_2d = nn.Parameter(packed, requires_grad=False)  # as a loader sets the checkpoint's codes
    replace_parameter_4bit_prequantized(module, "weight_2d", state.as_dict(packed=True), device=torch.device("cpu"))
    assert module.weight_2d.shape == original.shape and module.weight_2d.dtype == dtype
    assert_same_bits(module.weight_2d, F.dequantize_4bit(packed, state))


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("compress_statistics", [False, True])
def test_state_dict_holds_the_codes_under_the_parameter_s_name(quant_type, compress_statistics):
    module = Params()
    replace_parameter_4bit(module, "expert_weights", quant_type=quant_type, compress_statistics=compress_statistics)
    sd = module.state_dict()
    want = {"expert_weights", "expert_weights.absmax", "expert_weights.quant_map",
            f"expert_weights.quant_state.bitsandbytes__{quant_type}"}
    if compress_statistics:
        want |= {"expert_weights.nested_absmax", "expert_weights.nested_quant_map"}
    assert set(sd) == want | {"weight_2d", "bias_1d"}  # no parametrizations.expert_weights.original
    packed = module.parametrizations.expert_weights.original
    assert sd["expert_weights"].data_ptr() == packed.data_ptr() and torch.equal(sd["expert_weights"], packed)
    assert module.expert_weights.shape == (8, 512, 256)  # still readable afterwards


@pytest.mark.parametrize("compress_statistics", [False, True])
def test_checkpoint_round_trips_both_ways(compress_statistics):
    src = Params()
    replace_parameter_4bit(src, "expert_weights", quant_type="fp4", compress_statistics=compress_statistics)
    sd = src.state_dict()
    # As transformers loads it (bitsandbytes' way): the codes into the parameter, then the prefixed stats.
    dst = Params()
    dst.expert_weights = nn.Parameter(sd["expert_weights"].clone(), requires_grad=False)
    stats = {k: v for k, v in sd.items() if k.startswith("expert_weights.")}
    replace_parameter_4bit_prequantized(dst, "expert_weights", stats, device=torch.device("cpu"))
    assert_same_bits(dst.expert_weights, src.expert_weights)
    # load_state_dict into a module parametrized already (another quant type, another state).
    again = Params()
    replace_parameter_4bit(again, "expert_weights", quant_type="nf4", compress_statistics=not compress_statistics)
    before = again.parametrizations.expert_weights.original
    assert again.load_state_dict(sd).missing_keys == []
    assert again.parametrizations.expert_weights.original is before  # loaded into, as torch loads parameters
    assert_same_bits(again.expert_weights, src.expert_weights)
    assert set(again.state_dict()) == set(sd)


def _with_meta(sd, **change):
    key = "expert_weights.quant_state.bitsandbytes__nf4"
    meta = dict(json.loads(bytes(sd[key].tolist())), **change)
    return dict(sd, **{key: torch.tensor(list(json.dumps(meta).encode()), dtype=torch.uint8)})


def test_bad_checkpoints_are_refused_naming_the_key():
    src = Params()
    replace_parameter_4bit(src, "expert_weights")
    sd = src.state_dict()
    cases = [
        (_with_meta(sd, blocksize=0), r'expert_weights.quant_state.bitsandbytes__nf4\["blocksize"\]: expected one of'),
        (_with_meta(sd, shape=[8, 512, 255]), r"expert_weights: holds 524288 packed codes \(bytes\), the shape "
                                              r"\[8, 512, 255\] with blocksize 64 needs 522240"),
        (dict(sd, **{"expert_weights.quant_map": torch.full((16,), float("nan"))}),
         r"expert_weights.quant_map: expected nf4's 16 values"),
        (dict(sd, **{"expert_weights.absmax": sd["expert_weights.absmax"].double()}),
         r"expert_weights.absmax: expected float32, got float64"),
    ]
    for bad, message in cases:
        dst = Params()
        replace_parameter_4bit(dst, "expert_weights")
        state = dst.parametrizations.expert_weights[0].quant_state
        with pytest.raises(RuntimeError, match=r"while loading " + message):
            dst.load_state_dict(bad)
        assert dst.parametrizations.expert_weights[0].quant_state is state  # kept
        stats = {k: v for k, v in bad.items() if k.startswith("expert_weights.")}
        fresh = Params()
        fresh.expert_weights = nn.Parameter(bad["expert_weights"], requires_grad=False)
        with pytest.raises(ValueError, match=r"replace_parameter_4bit_prequantized: .*" + message.split(": ")[0]):
            replace_parameter_4bit_prequantized(fresh, "expert_weights", stats, device=torch.device("cpu"))
        assert not P.is_parametrized(fresh)
    other = Params()  # another shape: refused, as torch refuses a parameter of another size
    other.expert_weights = nn.Parameter(torch.randn(4, 512, 256))
    replace_parameter_4bit(other, "expert_weights")
    with pytest.raises(RuntimeError, match=r"size mismatch: the checkpoint holds a 4-bit tensor of shape "
                                           r"\[8, 512, 256\], the current model's is \[4, 512, 256\]"):
        other.load_state_dict(sd)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_moe_forward_uses_the_dequantized_experts(dtype):
    class SimpleMoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.expert_weights = nn.Parameter(torch.randn(4, 32, 64, dtype=dtype))

        def forward(self, x, expert_idx=0):
            return x @ self.expert_weights[expert_idx]

    module = SimpleMoE()
    W_dense = module.expert_weights.detach().clone()
    x = torch.randn(8, 32, dtype=dtype)
    with torch.no_grad():
        dense = module(x, expert_idx=1)
    replace_parameter_4bit(module, "expert_weights", quant_type="nf4")
    with torch.no_grad():
        out = module(x, expert_idx=1)
    W = module.expert_weights.detach()
    assert_same_bits(W, reference_round_trip(W_dense, 64, "nf4"))
    assert_same_bits(out, x @ W[1])
    abs_err, rel_err = errors(dense, out)
    assert abs_err < 0.5 and rel_err < 2.0  # bitsandbytes' bounds


def test_a_forward_dequantizes_each_parameter_once(monkeypatch):
    class TwoReads(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(64, 64))

        def forward(self, x):
            return x @ self.w + x @ self.w.t()

    module = TwoReads()
    replace_parameter_4bit(module, "w")
    calls = []
    real = F.dequantize_4bit
    monkeypatch.setattr(F, "dequantize_4bit", lambda *a, **k: calls.append(1) or real(*a, **k))
    module(torch.randn(2, 64))
    assert len(calls) == 1 and P._cache_enabled == 0 and P._cache == {}
    module.w  # outside a forward: no cache
    module.w
    assert len(calls) == 3


def test_error_conditions():
    module = Params()
    with pytest.raises(AttributeError, match="Module does not have parameter 'nonexistent'"):
        replace_parameter_4bit(module, "nonexistent")
    with pytest.raises(TypeError, match="Parameter 'not_param' is not an instance of nn.Parameter"):
        replace_parameter_4bit(module, "not_param")
    with pytest.raises(AttributeError, match="Module does not have parameter 'nonexistent'"):
        replace_parameter_4bit_prequantized(module, "nonexistent", {}, torch.device("cpu"))
    with pytest.raises(TypeError, match="Parameter 'not_param' is not an instance of nn.Parameter"):
        replace_parameter_4bit_prequantized(module, "not_param", {}, torch.device("cpu"))
    replace_parameter_4bit(module, "bias_1d")
    with pytest.raises(TypeError, match=r"'bias_1d' is not an instance of nn.Parameter \(it is parametrized already"):
        replace_parameter_4bit(module, "bias_1d")
    with pytest.raises(ValueError, match=r"4-bit quantization supports float32, float16 and bfloat16, got torch.int64"):
        holder = nn.Module()
        holder.p = nn.Parameter(torch.zeros(64, dtype=torch.int64), requires_grad=False)
        replace_parameter_4bit(holder, "p")


def test_quant_state_is_kept_and_saved():
    module = Params()
    replace_parameter_4bit(module, "weight_2d", quant_type="nf4", compress_statistics=True, blocksize=64)
    parametrization = module.parametrizations.weight_2d[0]
    assert isinstance(parametrization, Bnb4bitParametrization)
    state = parametrization.quant_state
    assert isinstance(state, F.QuantState) and state.quant_type == "nf4" and state.blocksize == 64 and state.nested
    sd = module.state_dict()
    for key in state.as_dict(packed=True):
        assert f"weight_2d.{key}" in sd


def test_multiple_parameters():
    module = Params()
    originals = module.weight_2d.detach().clone(), module.expert_weights.detach().clone()
    replace_parameter_4bit(module, "weight_2d", quant_type="nf4", blocksize=128)
    replace_parameter_4bit(module, "expert_weights", quant_type="fp4", blocksize=256)
    assert_same_bits(module.weight_2d, reference_round_trip(originals[0], 128, "nf4"))
    assert_same_bits(module.expert_weights, reference_round_trip(originals[1], 256, "fp4"))
    sd = module.state_dict()
    assert {"weight_2d", "expert_weights", "weight_2d.absmax", "expert_weights.absmax",
            "weight_2d.quant_state.bitsandbytes__nf4", "expert_weights.quant_state.bitsandbytes__fp4"} <= set(sd)


def test_parametrization_forward_method():
    original = torch.randn(64, 32)
    packed, state = F.quantize_4bit(original, quant_type="nf4")
    out = Bnb4bitParametrization(state).forward(packed)
    assert out.shape == original.shape and out.dtype == torch.float32 and out.device == original.device
    assert_same_bits(out, reference_round_trip(original, 64, "nf4"))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gradient_behavior(dtype):
    module = Params(dtype=dtype)
    module.weight_2d.requires_grad_(True)
    replace_parameter_4bit(module, "weight_2d", quant_type="nf4")
    assert not module.weight_2d.requires_grad
    assert not module.parametrizations.weight_2d.original.requires_grad


class TestCacheCounterUnderCheckpointing:
    """The cache hooks stay balanced when non-reentrant checkpointing stops its recompute early (bitsandbytes
    #1999): otherwise the cache stays on and keeps every dequantized parameter."""

    def setup_method(self):
        P._cache_enabled, P._cache = 0, {}

    teardown_method = setup_method

    def test_counter_balanced_under_checkpoint_early_stop(self):
        from torch.utils.checkpoint import checkpoint

        from bnb.nn.parametrize import _register_parametrization_hooks

        class Chain(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(8, 8)
                self.tail = nn.Linear(8, 8)

            def forward(self, x):
                return self.tail(self.a(x))

        m = Chain()
        _register_parametrization_hooks(m.tail, "weight")
        for _ in range(3):
            checkpoint(m, torch.randn(2, 8, requires_grad=True), use_reentrant=False).sum().backward()
        assert P._cache_enabled == 0 and P._cache == {}

    def test_counter_never_goes_negative(self):
        from bnb.nn.parametrize import _disable_parametrization_cache

        P._cache[("k",)] = torch.zeros(1)
        _disable_parametrization_cache(nn.Identity(), (), None)
        assert P._cache_enabled == 0 and P._cache == {}


def test_bnb_nn_parametrize_is_reachable():
    assert bnb.nn.parametrize.replace_parameter_4bit is replace_parameter_4bit


def test_the_quant_state_follows_the_module_to_another_device():
    # module.to(device) moves the codes (a parameter) but not the state (an attribute): reading the parameter used
    # to mix devices. The meta device stands in for an accelerator here.
    module = nn.Module()
    module.w = nn.Parameter(torch.randn(16, 64))
    replace_parameter_4bit(module, "w", compress_statistics=True)
    module.to("meta")
    w = module.w
    assert w.device.type == "meta" and w.shape == (16, 64)
    state = module.parametrizations.w[0].quant_state
    assert {t.device.type for t in (state.absmax, state.code, state.offset, state.state2.absmax)} == {"meta"}
