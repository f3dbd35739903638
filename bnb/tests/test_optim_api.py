"""bnb.optim's API: bitsandbytes 0.50's names, signatures and defaults; state dicts (a round trip continues bit for
bit, a bitsandbytes state dict built by hand loads and continues as the op definition says, a bad one is refused
with the key named and the optimizer left as it was); GlobalOptimManager overrides; min_8bit_size; skip_zeros;
paged optimizers on the CPU; argument errors; and a compiled training step (each update one node of the graph)."""

import gc
import inspect
import io
import re
import warnings

import pytest
import torch

import bnb
from bnb import functional as F
from bnb import paged_memory
from bnb.optim import paged
from bnb.reference import optim as ref

BIG, SMALL = (64, 130), (7, 9)  # 8320 elements: 8-bit state (33 blocks, the last partial); 63: 32-bit


@pytest.fixture(autouse=True)
def fresh_manager():
    """The GlobalOptimManager is process-wide: each test starts without overrides."""
    bnb.optim.GlobalOptimManager.get_instance().initialize()
    yield
    bnb.optim.GlobalOptimManager.get_instance().initialize()


def params(seed=0, shapes=(BIG, SMALL), dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter((torch.randn(s, generator=g) * 0.1).to(dtype)) for s in shapes]


def set_grads(ps, seed):
    g = torch.Generator().manual_seed(seed)
    for p in ps:
        p.grad = (torch.randn(p.shape, generator=g) * 0.1).to(p.dtype)


def bits(t):
    return t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


# --------------------------------------------------------------------------------------------------------------------
# Names, signatures, defaults: bitsandbytes 0.50's (its positional parameters, as its source has them).

BITSANDBYTES_0_50 = {
    "Adam": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False, "
             "optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "Adam8bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False, "
                 "optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "Adam32bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False, "
                  "optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "PagedAdam": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False, "
                  "optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "PagedAdam8bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False,"
                      " optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "PagedAdam32bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, "
                       "amsgrad=False, optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "AdamW": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False, "
              "optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "AdamW8bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False, "
                  "optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "AdamW32bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False,"
                   " optim_bits=32, args=None, min_8bit_size=4096, is_paged=False"),
    "PagedAdamW": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False,"
                   " optim_bits=32, args=None, min_8bit_size=4096"),
    "PagedAdamW8bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, "
                       "amsgrad=False, optim_bits=32, args=None, min_8bit_size=4096"),
    "PagedAdamW32bit": ("params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, "
                        "amsgrad=False, optim_bits=32, args=None, min_8bit_size=4096"),
    "SGD": ("params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, optim_bits=32, "
            "args=None, min_8bit_size=4096"),
    "SGD8bit": ("params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None, "
                "min_8bit_size=4096"),
    "SGD32bit": ("params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None, "
                 "min_8bit_size=4096"),
    "RMSprop": ("params, lr=0.01, alpha=0.99, eps=1e-08, weight_decay=0, momentum=0, centered=False, "
                "optim_bits=32, args=None, min_8bit_size=4096"),
    "RMSprop8bit": ("params, lr=0.01, alpha=0.99, eps=1e-08, weight_decay=0, momentum=0, "
                    "centered=False, args=None, min_8bit_size=4096"),
    "RMSprop32bit": ("params, lr=0.01, alpha=0.99, eps=1e-08, weight_decay=0, momentum=0, "
                     "centered=False, args=None, min_8bit_size=4096"),
    "Adagrad": ("params, lr=0.01, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10, "
                "optim_bits=32, args=None, min_8bit_size=4096"),
    "Adagrad8bit": ("params, lr=0.01, lr_decay=0, weight_decay=0, initial_accumulator_value=0, "
                    "eps=1e-10, optim_bits=8, args=None, min_8bit_size=4096"),
    "Adagrad32bit": ("params, lr=0.01, lr_decay=0, weight_decay=0, initial_accumulator_value=0, "
                     "eps=1e-10, optim_bits=32, args=None, min_8bit_size=4096"),
    "Lion": ("params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0, optim_bits=32, args=None, "
             "min_8bit_size=4096, is_paged=False"),
    "Lion8bit": ("params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0, args=None, min_8bit_size=4096,"
                 " is_paged=False"),
    "Lion32bit": ("params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0, args=None, "
                  "min_8bit_size=4096, is_paged=False"),
    "PagedLion": ("params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0, optim_bits=32, args=None, "
                  "min_8bit_size=4096"),
    "PagedLion8bit": ("params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0, args=None, "
                      "min_8bit_size=4096"),
    "PagedLion32bit": ("params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0, args=None, "
                       "min_8bit_size=4096"),
    "LAMB": ("params, lr=0.001, bias_correction=True, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, "
             "amsgrad=False, adam_w_mode=True, optim_bits=32, args=None, min_8bit_size=4096, "
             "max_unorm=1.0"),
    "LAMB8bit": ("params, lr=0.001, bias_correction=True, betas=(0.9, 0.999), eps=1e-08, "
                 "weight_decay=0, amsgrad=False, adam_w_mode=True, args=None, min_8bit_size=4096, "
                 "max_unorm=1.0"),
    "LAMB32bit": ("params, lr=0.001, bias_correction=True, betas=(0.9, 0.999), eps=1e-08, "
                  "weight_decay=0, amsgrad=False, adam_w_mode=True, args=None, min_8bit_size=4096, "
                  "max_unorm=1.0"),
    "LARS": ("params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, optim_bits=32, "
             "args=None, min_8bit_size=4096, max_unorm=0.02"),
    "LARS8bit": ("params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None, "
                 "min_8bit_size=4096, max_unorm=0.02"),
    "LARS32bit": ("params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None, "
                  "min_8bit_size=4096, max_unorm=0.02"),
    "PytorchLARS": ("params, lr=0.01, momentum=0, dampening=0, weight_decay=0, nesterov=False, "
                    "max_unorm=0.02"),
    "AdEMAMix": ("params, lr=0.001, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None,"
                 " eps=1e-08, weight_decay=0.01, optim_bits=32, min_8bit_size=4096, is_paged=False"),
    "AdEMAMix8bit": ("params, lr=0.001, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, "
                     "t_beta3=None, eps=1e-08, weight_decay=0.01, min_8bit_size=4096, is_paged=False"),
    "PagedAdEMAMix8bit": ("params, lr=0.001, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, "
                          "t_beta3=None, eps=1e-08, weight_decay=0.01, min_8bit_size=4096"),
    "PagedAdEMAMix": ("params, lr=0.001, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, "
                      "t_beta3=None, eps=1e-08, weight_decay=0.01, optim_bits=32, min_8bit_size=4096"),
    "AdEMAMix32bit": ("params, lr=0.001, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, "
                      "t_beta3=None, eps=1e-08, weight_decay=0.01, min_8bit_size=4096, is_paged=False"),
    "PagedAdEMAMix32bit": ("params, lr=0.001, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, "
                           "t_beta3=None, eps=1e-08, weight_decay=0.01, min_8bit_size=4096"),
}


def test_every_name_of_bitsandbytes_is_here():
    assert set(BITSANDBYTES_0_50) | {"GlobalOptimManager"} <= set(bnb.optim.__all__)
    for name in bnb.optim.__all__:
        assert hasattr(bnb.optim, name), name
    for fn in ("optimizer_update_32bit", "optimizer_update_8bit_blockwise", "percentile_clipping"):
        assert callable(getattr(bnb.functional, fn))


@pytest.mark.parametrize("name", list(BITSANDBYTES_0_50))
def test_signature_is_bitsandbytes(name):
    sig = inspect.signature(getattr(bnb.optim, name))
    positional = [p for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    ours = ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in positional)
    assert ours == BITSANDBYTES_0_50[name]
    extra = {p.name: p.default for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
    assert extra == ({} if name == "PytorchLARS" else {"percentile_clipping": 100, "block_wise": True})


# --------------------------------------------------------------------------------------------------------------------
# State dicts.

ROUND_TRIP = {
    "Adam8bit": lambda ps: bnb.optim.Adam8bit(ps, lr=1e-2),
    "AdamW": lambda ps: bnb.optim.AdamW(ps, lr=1e-2),
    "AdEMAMix8bit": lambda ps: bnb.optim.AdEMAMix8bit(ps, lr=1e-2, t_alpha=10, t_beta3=10),
    "AdEMAMix32bit": lambda ps: bnb.optim.AdEMAMix32bit(ps, lr=1e-2),
    "Lion8bit": lambda ps: bnb.optim.Lion8bit(ps, lr=1e-3, percentile_clipping=5),
    "LAMB": lambda ps: bnb.optim.LAMB(ps, lr=1e-2),
    "LARS8bit": lambda ps: bnb.optim.LARS8bit(ps, 0.1, momentum=0.9),
    "SGD": lambda ps: bnb.optim.SGD(ps, 0.1, momentum=0.9),
    "RMSprop8bit": lambda ps: bnb.optim.RMSprop8bit(ps, 1e-3),
    "Adagrad8bit": lambda ps: bnb.optim.Adagrad8bit(ps),
    "PagedAdamW8bit": lambda ps: bnb.optim.PagedAdamW8bit(ps),
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_state_dict_round_trip_continues_bit_for_bit(name):
    make = ROUND_TRIP[name]
    ps = params(dtype=torch.bfloat16)
    opt = make(ps)
    for step in range(3):
        set_grads(ps, step)
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    # bitsandbytes 0.50's layout: step beside the wrapped tensors
    first = saved["state"][0]
    assert first["step"] == 3 and set(first) == {"step", "__bnb_optimizer_quant_state__"}
    assert "state1" in first["__bnb_optimizer_quant_state__"]

    ps2 = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt2 = make(ps2)
    opt2.load_state_dict(saved)
    for p, p2 in zip(ps, ps2):
        assert_same_state(opt.state[p], opt2.state[p2])
    for step in range(3, 6):
        set_grads(ps, step)
        set_grads(ps2, step)
        opt.step()
        opt2.step()
    for p, p2 in zip(ps, ps2):
        assert torch.equal(bits(p.detach()), bits(p2.detach()))
        assert_same_state(opt.state[p], opt2.state[p2])
    # the loaded state is the optimizer's own: changing the state dict afterwards changes nothing
    saved["state"][0]["__bnb_optimizer_quant_state__"]["state1"].zero_()
    assert opt2.state[ps2[0]]["state1"].any()


def bitsandbytes_adam8bit_state(p, m, v, step, layout):
    """An Adam8bit state dict as bitsandbytes writes it, made here from float moments m and v with the blockwise
    quantizer and bitsandbytes' codebooks (signed dynamic for m, unsigned for v)."""
    qmap1, qmap2 = F.create_dynamic_map(signed=True), F.create_dynamic_map(signed=False)
    codes1, s1 = F.quantize_blockwise(m, code=qmap1, blocksize=256)
    codes2, s2 = F.quantize_blockwise(v, code=qmap2, blocksize=256)
    tensors = {"state1": codes1, "state2": codes2, "qmap1": qmap1, "qmap2": qmap2, "absmax1": s1.absmax,
               "absmax2": s2.absmax}
    state = {"step": step, **tensors} if layout == "flat" else {"step": step,
                                                                "__bnb_optimizer_quant_state__": tensors}
    group = {"lr": 2e-3, "betas": (0.9, 0.995), "eps": 1e-8, "weight_decay": 0.0, "alpha": 0.0, "t_alpha": None,
             "t_beta3": None, "params": [0]}
    return {"state": {0: state}, "param_groups": [group]}


@pytest.mark.parametrize("layout", ["wrapped", "flat"])  # bitsandbytes 0.50's, and earlier versions'
def test_loads_a_bitsandbytes_state_dict(layout):
    p = params(shapes=(BIG,))[0]
    g = torch.Generator().manual_seed(5)
    m, v = torch.randn(BIG, generator=g) * 0.01, torch.rand(BIG, generator=g) * 1e-4
    state_dict = bitsandbytes_adam8bit_state(p, m, v, 7, layout)
    opt = bnb.optim.Adam8bit([p])  # lr 1e-3, betas (0.9, 0.999): the state dict's replace them
    opt.load_state_dict(state_dict)
    assert opt.param_groups[0]["lr"] == 2e-3 and opt.param_groups[0]["betas"] == (0.9, 0.995)
    assert opt.state[p]["step"] == 7

    want_p = p.detach().clone()
    want = {k: v.clone() for k, v in state_dict["state"][0].get("__bnb_optimizer_quant_state__",
                                                                 state_dict["state"][0]).items()
            if isinstance(v, torch.Tensor)}
    set_grads([p], 0)
    opt.step()
    ref.optimizer_update_8bit_blockwise("adam", p.grad, want_p, want["state1"], want["state2"], 0.9, 0.995, 0.0, 0.0,
                                        1e-8, 8, 2e-3, want["qmap1"], want["qmap2"], want["absmax1"],
                                        want["absmax2"], 0.0, 1.0)
    assert torch.equal(p.detach(), want_p)
    for k in want:
        assert torch.equal(opt.state[p][k], want[k]), k


def good_state_dict():
    p = params(shapes=(BIG,))[0]
    g = torch.Generator().manual_seed(5)
    return bitsandbytes_adam8bit_state(p, torch.randn(BIG, generator=g) * 0.01, torch.rand(BIG, generator=g), 3,
                                       "flat")


def _set(key, value):
    def change(sd):
        sd["state"][0][key] = value
    return change


def _drop(key):
    def change(sd):
        del sd["state"][0][key]
    return change


def _group(key, value):
    def change(sd):
        sd["param_groups"][0][key] = value
    return change


qmap_nan = F.create_dynamic_map()
qmap_nan[7] = float("nan")
BAD = [
    (_set("state1", torch.zeros(BIG, dtype=torch.float16)), r"key 'state1': expected a float32 \(32-bit\) or uint8 "
     r"\(8-bit\) tensor of shape \[64, 130\], got a float16 tensor of shape \[64, 130\]"),
    (_set("state2", torch.zeros((130, 64), dtype=torch.uint8)), r"key 'state2': expected a uint8 tensor of shape "
     r"\[64, 130\], got a uint8 tensor of shape \[130, 64\]"),
    (_set("state2", torch.zeros(BIG)), r"key 'state2': expected a uint8 tensor of shape \[64, 130\], got a float32"),
    (_set("absmax1", torch.ones(32)), r"key 'absmax1': expected a float32 tensor of shape \[33\], got a float32 "
     r"tensor of shape \[32\]"),
    (_set("absmax2", -torch.ones(33)), r"key 'absmax2': expected finite block scales >= 0"),
    (_set("qmap1", qmap_nan), r"key 'qmap1': expected 256 finite ascending values"),
    (_set("qmap1", F.create_dynamic_map().flip(0)), r"key 'qmap1': expected 256 finite ascending values"),
    (_set("qmap2", torch.zeros(255)), r"key 'qmap2': expected a float32 tensor of shape \[256\], got a float32 tensor "
     r"of shape \[255\]"),
    (_drop("qmap2"), r"key 'qmap2': missing; expected a float32 tensor of shape \[256\]"),
    (_drop("state2"), r"key 'state2': missing; expected a uint8 tensor of shape \[64, 130\]"),
    (_drop("step"), r"key 'step': expected an int >= 0 \(the number of updates made\), got NoneType"),
    (_set("step", -1), r"key 'step': expected an int >= 0"),
    (_set("step", 2.5), r"key 'step': expected an int >= 0 .*got float 2.5"),
    (_set("unorm_vec", torch.zeros(2)), r"key 'unorm_vec': expected a float32 tensor of shape \[1\]"),
    (_set("gnorm_vec", torch.zeros(100, dtype=torch.float64)), r"key 'gnorm_vec': expected a float32 tensor of "
     r"shape \[100\]"),
    (_set("exp_avg", torch.zeros(BIG)), r"key 'exp_avg': not a key of bnb's optimizer state \(torch.optim's state\?"),
    (_set("max1", torch.zeros(1)), r"key 'max1': non-blockwise 8-bit state \(bitsandbytes' block_wise=False\)"),
    (_group("lr", -1.0), r"param_groups\[0\]: lr must be a finite number >= 0, got -1.0"),
    (_group("betas", (1.0, 0.9)), r"param_groups\[0\]: betas\[0\] must be in \[0, 1\), got 1.0"),
    (_group("betas", (0.9,)), r"param_groups\[0\]: betas must hold 2 values \(betas\[0\], betas\[1\]\), got \(0.9,\)"),
    (lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0], params=[1])),
     r"the state dict has 2 parameter groups, the optimizer 1"),
    (lambda sd: sd["param_groups"][0]["params"].append(1), r"param_groups\[0\] has 2 parameters in the state dict, "
     r"1 in the optimizer"),
    (lambda sd: sd.pop("state"), r"the state dict has no 'state'"),
    (lambda sd: sd.update(state=[]), r"'state' must be a dict of parameter index to state, got list"),
    (lambda sd: sd["param_groups"][0].pop("params"), r"'param_groups' must be a list of dicts, each with a 'params' "
     r"list"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_state_dict_is_refused_by_name(case):
    change, message = BAD[case]
    p = params(shapes=(BIG,))[0]
    opt = bnb.optim.Adam8bit([p])
    set_grads([p], 0)
    opt.step()
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in opt.state[p].items()}
    groups_before = [dict(g, params=None) for g in opt.param_groups]
    state_dict = good_state_dict()
    opt.load_state_dict(good_state_dict())  # the unchanged one loads
    opt.load_state_dict(opt.state_dict())
    change(state_dict)
    after_good = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in opt.state[p].items()}
    with pytest.raises(ValueError, match=r"^bnb\.optim\.Adam8bit: (load_state_dict: )?.*" + message):
        opt.load_state_dict(state_dict)
    assert_same_state(opt.state[p], after_good)  # nothing changed
    assert before["step"] == 1 and after_good["step"] == 3
    assert [dict(g, params=None) for g in opt.param_groups] != groups_before  # the good load took the dict's lr


def test_state_of_another_optimizer_kind_is_refused():
    p = params(shapes=(BIG,))[0]
    sgd = bnb.optim.SGD8bit([p], 0.1, momentum=0.9)
    set_grads([p], 0)
    sgd.step()
    adam = bnb.optim.Adam8bit([p])
    with pytest.raises(ValueError, match=r"key 'state2': missing; expected a uint8 tensor"):
        adam.load_state_dict(sgd.state_dict())
    adam.step()
    with pytest.raises(ValueError, match=r"key 'state2': unexpected \(this optimizer keeps one state\)"):
        sgd.load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match=r"AdEMAMix8bit: load_state_dict: param_groups\[0\]: betas must hold 3 "
                                         r"values \(betas\[0\], betas\[1\], betas\[2\]\), got \(0.9, 0.999\)"):
        bnb.optim.AdEMAMix8bit([p]).load_state_dict(adam.state_dict())
    adam_state = adam.state_dict()
    adam_state["param_groups"][0]["betas"] = (0.9, 0.999, 0.9999)
    with pytest.raises(ValueError, match=r"AdEMAMix8bit: load_state_dict: .*key 'state1': expected a uint8 tensor "
                                         r"of shape \[2, 64, 130\], got a uint8 tensor of shape \[64, 130\]"):
        bnb.optim.AdEMAMix8bit([p]).load_state_dict(adam_state)


def test_percentile_clipping_starts_its_history_after_a_load_without_one():
    """A bitsandbytes 0.50 state dict has no gnorm_vec: percentile clipping then starts its history at the next step
    as at step 1 (every slot this step's squared norm, so no clipping yet), rather than clip against zeros."""
    ps, ps2 = params(shapes=(BIG,)), params(shapes=(BIG,))
    plain = bnb.optim.Adam8bit(ps)
    for step in range(3):
        set_grads(ps, step)
        plain.step()
    clipped = bnb.optim.Adam8bit(ps2, percentile_clipping=5)
    with torch.no_grad():
        ps2[0].copy_(ps[0])
    clipped.load_state_dict(plain.state_dict())
    assert "gnorm_vec" not in clipped.state[ps2[0]]
    set_grads(ps, 3)
    set_grads(ps2, 3)
    plain.step()
    clipped.step()
    assert torch.equal(ps[0], ps2[0])  # scale 1
    history = clipped.state[ps2[0]]["gnorm_vec"]
    assert torch.equal(history, torch.full((100,), history[0].item()))
    assert history[0].item() == pytest.approx((ps2[0].grad.double() ** 2).sum().item(), rel=1e-6)


def test_a_32bit_state_loads_into_an_8bit_optimizer_and_stays_32bit():
    """The state decides each update (as in bitsandbytes): a checkpoint's 32-bit state is not requantized."""
    ps = params()
    adam32 = bnb.optim.Adam(ps)
    set_grads(ps, 0)
    adam32.step()
    adam8 = bnb.optim.Adam8bit(ps)
    adam8.load_state_dict(adam32.state_dict())
    set_grads(ps, 1)
    adam8.step()
    assert adam8.state[ps[0]]["state1"].dtype == torch.float32 and adam8.state[ps[0]]["step"] == 2


# --------------------------------------------------------------------------------------------------------------------
# GlobalOptimManager, min_8bit_size, skip_zeros.

def embedding_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(500, 16), torch.nn.Linear(16, 512))


def train_steps(model, opts, steps=3):
    for step in range(steps):
        torch.manual_seed(100 + step)
        loss = model(torch.randint(0, 500, (32,))).square().mean()
        model.zero_grad()
        loss.backward()
        for opt in opts:
            opt.step()


@pytest.mark.parametrize("how", ["override_config", "register_module_override"])
def test_override_gives_an_embedding_32bit_state(how):
    model = embedding_model()
    mng = bnb.optim.GlobalOptimManager.get_instance()
    if how == "override_config":
        mng.register_parameters(model.parameters())
        mng.override_config(model[0].weight, "optim_bits", 32)
    else:
        mng.register_module_override(model[0], "weight", {"optim_bits": 32})
    opt = bnb.optim.Adam8bit(model.parameters(), lr=1e-2)
    reference_model = embedding_model()  # the same, with the embedding given to an optimizer of its own
    reference = [bnb.optim.Adam32bit([reference_model[0].weight], lr=1e-2),
                 bnb.optim.Adam8bit(reference_model[1].parameters(), lr=1e-2)]
    train_steps(model, [opt])
    train_steps(reference_model, reference)
    assert opt.state[model[0].weight]["state1"].dtype == torch.float32  # 8000 elements, overridden
    assert "qmap1" not in opt.state[model[0].weight]
    assert opt.state[model[1].weight]["state1"].dtype == torch.uint8  # 8192 elements, 8-bit
    for p, q in zip(model.parameters(), reference_model.parameters()):
        assert torch.equal(p, q)  # the embedding had a real 32-bit Adam update


def test_override_by_position_survives_new_tensors():
    """Overrides set before register_parameters follow the parameters' positions to new tensors (a plain tensor's
    .to(device) makes one)."""
    a, b = params()
    mng = bnb.optim.GlobalOptimManager.get_instance()
    mng.override_config([a], key_value_dict={"optim_bits": 32, "lr": 0.0})
    mng.register_parameters([a, b])
    a2, b2 = torch.nn.Parameter(a.detach().clone()), torch.nn.Parameter(b.detach().clone())
    opt = bnb.optim.Adam8bit([a2, b2])
    set_grads([a2, b2], 0)
    opt.step()
    assert opt.state[a2]["state1"].dtype == torch.float32
    assert torch.equal(a2, a)  # lr 0 by the override: unchanged
    assert opt.get_config(0, 0, opt.param_groups[0])["lr"] == 0.0


def test_override_after_register_applies_by_tensor():
    a, b = params()
    mng = bnb.optim.GlobalOptimManager.get_instance()
    mng.register_parameters([a, b])
    mng.override_config(a, "optim_bits", 32)
    opt = bnb.optim.Adam8bit([a, b])
    set_grads([a, b], 0)
    opt.step()
    assert opt.state[a]["state1"].dtype == torch.float32
    assert opt.state[b]["state1"].dtype == torch.float32  # small: 32-bit anyway


def test_override_errors():
    mng = bnb.optim.GlobalOptimManager.get_instance()
    p = params()[0]
    with pytest.raises(ValueError, match=r"override_config: unknown config key\(s\) 'optim_bit'; expected any of lr"):
        mng.override_config(p, "optim_bit", 32)
    with pytest.raises(ValueError, match=r"optim_bits must be 8 or 32, got 16"):
        mng.override_config(p, "optim_bits", 16)
    with pytest.raises(ValueError, match=r"key 'lr' needs a value"):
        mng.override_config(p, "lr")
    mng.override_config(p, "betas", (0.9, 1.5))  # checked where it takes effect:
    opt = bnb.optim.Adam8bit([p])
    set_grads([p], 0)
    with pytest.raises(ValueError, match=r"bnb\.optim\.Adam8bit: betas\[1\] must be in \[0, 1\), got 1.5"):
        opt.step()


LAYOUT = {  # bitsandbytes' state of a [64, 130] parameter (33 blocks of 256): key -> (dtype, shape)
    "Adam8bit": {"state1": (torch.uint8, BIG), "state2": (torch.uint8, BIG), "qmap1": (torch.float32, (256,)),
                 "qmap2": (torch.float32, (256,)), "absmax1": (torch.float32, (33,)),
                 "absmax2": (torch.float32, (33,))},
    "AdEMAMix8bit": {"state1": (torch.uint8, (2, *BIG)), "state2": (torch.uint8, BIG),
                     "qmap1": (torch.float32, (256,)), "qmap2": (torch.float32, (256,)),
                     "absmax1": (torch.float32, (2, 33)), "absmax2": (torch.float32, (33,))},
    "RMSprop8bit": {"state1": (torch.uint8, BIG), "qmap1": (torch.float32, (256,)), "absmax1": (torch.float32, (33,))},
    "LAMB": {"state1": (torch.float32, BIG), "state2": (torch.float32, BIG), "unorm_vec": (torch.float32, (1,))},
    "Lion8bit": {"state1": (torch.uint8, BIG), "qmap1": (torch.float32, (256,)), "absmax1": (torch.float32, (33,)),
                 "gnorm_vec": (torch.float32, (100,))},
}


@pytest.mark.parametrize("name", list(LAYOUT))
def test_state_layout_is_bitsandbytes(name):
    p = params(shapes=(BIG,))[0]
    opt = getattr(bnb.optim, name)([p], **({"percentile_clipping": 5} if name == "Lion8bit" else {}))
    set_grads([p], 0)
    opt.step()
    state = opt.state[p]
    assert state["step"] == 1 and type(state["step"]) is int
    assert {k: (v.dtype, tuple(v.shape)) for k, v in state.items() if k != "step"} == LAYOUT[name]
    # bitsandbytes' codebooks: the signed dynamic map for state1 (of every optimizer: RMSprop's too), unsigned for
    # state2
    if "qmap1" in state:
        assert torch.equal(state["qmap1"], F.create_dynamic_map(signed=True))
    if "qmap2" in state:
        assert torch.equal(state["qmap2"], F.create_dynamic_map(signed=False))


@pytest.mark.parametrize("min_8bit_size", [4096, 100])
def test_min_8bit_size(min_8bit_size):
    sizes = [min_8bit_size - 1, min_8bit_size, 3 * min_8bit_size]
    ps = [torch.nn.Parameter(torch.randn(n)) for n in sizes]
    kwargs = {} if min_8bit_size == 4096 else {"min_8bit_size": min_8bit_size}  # 4096: the default
    opt = bnb.optim.AdamW8bit(ps, **kwargs)
    set_grads(ps, 0)
    opt.step()
    assert [opt.state[p]["state1"].dtype for p in ps] == [torch.float32, torch.uint8, torch.uint8]
    assert opt.state[ps[2]]["absmax1"].shape == (-(-sizes[2] // 256),)


@pytest.mark.parametrize("optimizer", ["AdamW8bit", "AdamW"])
def test_skip_zeros_leaves_elements_without_gradient(optimizer):
    p = params(shapes=(BIG,))[0]
    start = p.detach().clone()
    mng = bnb.optim.GlobalOptimManager.get_instance()
    mng.override_config(p, "skip_zeros", True)
    opt = getattr(bnb.optim, optimizer)([p], weight_decay=0.1)
    set_grads([p], 0)
    zero = torch.rand(BIG, generator=torch.Generator().manual_seed(1)) < 0.3
    p.grad[zero] = 0
    opt.step()
    assert torch.equal(p.detach()[zero], start[zero])  # weight decay would have moved them
    assert (p.detach() != start)[~zero].all()
    mng.initialize()
    q = torch.nn.Parameter(start.clone())
    opt2 = getattr(bnb.optim, optimizer)([q], weight_decay=0.1)
    q.grad = p.grad.clone()
    opt2.step()
    assert (q.detach() != start)[zero].all()  # without skip_zeros they move


# --------------------------------------------------------------------------------------------------------------------
# Paged optimizers.

def test_paged_optimizers_on_cpu_are_the_plain_ones():
    shapes = ((400, 260), SMALL)  # 104000 elements: above the size bitsandbytes pages
    ps, ps2 = params(shapes=shapes), params(shapes=shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say on the CPU
        paged_opt, plain = bnb.optim.PagedAdamW8bit(ps), bnb.optim.AdamW8bit(ps2)
        for step in range(3):
            set_grads(ps, step)
            set_grads(ps2, step)
            paged_opt.step()
            plain.step()
    assert paged_opt.is_paged and not plain.is_paged
    for p, p2 in zip(ps, ps2):
        assert torch.equal(p, p2)
        assert_same_state(paged_opt.state[p], plain.state[p2])


@pytest.mark.parametrize("cls", ["PagedAdam", "PagedAdam8bit", "PagedAdam32bit", "PagedAdamW", "PagedAdamW8bit",
                                 "PagedAdamW32bit", "PagedLion", "PagedLion8bit", "PagedLion32bit", "PagedAdEMAMix",
                                 "PagedAdEMAMix8bit", "PagedAdEMAMix32bit"])
def test_paged_classes_step_on_cpu(cls):
    ps = params()
    opt = getattr(bnb.optim, cls)(ps)
    set_grads(ps, 0)
    before = [p.detach().clone() for p in ps]
    opt.step()
    assert opt.is_paged and all(not torch.equal(p, b) for p, b in zip(ps, before))
    want = torch.uint8 if "8bit" in cls else torch.float32
    assert opt.state[ps[0]]["state1"].dtype == want


@pytest.mark.parametrize("name", ["AdamW8bit", "Lion32bit"])
def test_update_step_called_directly_with_grad_on_equals_step(name):
    """bitsandbytes' subclasses call update_step themselves, with autograd on (step() calls it with grad off): the
    parameters and states then equal step()'s, and the parameters stay leaves."""
    ps, ps2 = params(), params()
    opt, opt2 = getattr(bnb.optim, name)(ps), getattr(bnb.optim, name)(ps2)
    for step in range(2):
        set_grads(ps, step)
        set_grads(ps2, step)
        opt.step()
        assert torch.is_grad_enabled()
        for pindex, p in enumerate(ps2):
            if len(opt2.state[p]) == 0:
                opt2.init_state(opt2.param_groups[0], p, 0, pindex)
            opt2.update_step(opt2.param_groups[0], p, 0, pindex)
            assert p.grad_fn is None and p.is_leaf
    for p, q in zip(ps, ps2):
        assert torch.equal(p, q)
        assert_same_state(opt.state[p], opt2.state[q])


def test_paged_cuda_state_is_checked_against_free_memory(monkeypatch):
    """Where a GPU has no managed memory, paged state is ordinary device memory (bnb.optim.paged): a buffer larger
    than what is free is refused before it is asked for. The check itself, with the free memory stubbed (no GPU
    needed)."""
    monkeypatch.setattr(paged, "_available_cuda_bytes", lambda device: 100 * 2**20)
    paged.check_fits("PagedAdamW", 99 * 2**20, torch.device("cuda", 0))  # fits
    with pytest.raises(torch.OutOfMemoryError, match=r"^bnb\.optim\.PagedAdamW: a paged optimizer state buffer needs "
                                                     r"101\.0 MiB but cuda:0 has 100\.0 MiB free"):
        paged.check_fits("PagedAdamW", 101 * 2**20, torch.device("cuda", 0))
    calls = []
    monkeypatch.setattr(paged, "check_fits", lambda *a: calls.append(a))
    paged.state_buffer("PagedAdamW", (10,), torch.float32, torch.device("cpu"), True)  # not CUDA: no check
    assert calls == []


def test_paged_cuda_state_falls_back_to_device_memory_once_warned(monkeypatch):
    """A GPU without managed memory (stubbed: no GPU needed) gets one warning, then the checked device memory."""
    class Checked(Exception):
        pass

    def no_managed(*a):
        raise ValueError("CUDA device 0 has no concurrent managed access")

    def check(owner, nbytes, device):
        raise Checked(owner, nbytes, str(device))

    monkeypatch.setattr(paged_memory, "_managed_unavailable", set())
    monkeypatch.setattr(paged, "managed_zeros", no_managed)
    monkeypatch.setattr(paged, "check_fits", check)
    with pytest.warns(UserWarning, match=r"PagedAdamW: no managed memory on cuda:0 \(CUDA device 0 has no concurrent "
                                         r"managed access\); paged state is ordinary device memory"):
        with pytest.raises(Checked) as first:
            paged.state_buffer("PagedAdamW", (400, 260), torch.float32, torch.device("cuda", 0), True)
    assert first.value.args == ("PagedAdamW", 400 * 260 * 4, "cuda:0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        with pytest.raises(Checked):
            paged.state_buffer("PagedAdamW", (400, 260), torch.float32, torch.device("cuda", 0), True)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("name", ["AdamW8bit", "Lion32bit", "AdEMAMix8bit", "PagedAdamW8bit"])
def test_cuda_equals_cpu(name):
    """The ops are bit-exact to one definition on every device: so is an optimizer."""
    shapes = ((400, 260), SMALL)  # above the size bitsandbytes pages
    ps, ps_cuda = params(shapes=shapes), [torch.nn.Parameter(p.detach().cuda()) for p in params(shapes=shapes)]
    opt = getattr(bnb.optim, name)(ps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt_cuda = getattr(bnb.optim, name)(ps_cuda)
        for step in range(3):
            set_grads(ps, step)
            for p, q in zip(ps_cuda, ps):
                p.grad = q.grad.cuda()
            opt.step()
            opt_cuda.step()
    assert not [w for w in caught if "managed memory" in str(w.message)]  # an H100 has it
    for p, q in zip(ps, ps_cuda):
        assert q.device.type == "cuda" and opt_cuda.state[q]["state1"].device.type == "cuda"
        assert torch.equal(p, q.cpu())
        for k, v in opt.state[p].items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, opt_cuda.state[q][k].cpu()), k


@cuda
def test_paged_cuda_state_is_managed_memory_and_steps_as_the_plain_state():
    """Paged state on CUDA is unified memory (bnb.optim.paged): outside torch's allocator, marked for the prefetch,
    and the steps equal the plain optimizer's bit for bit; freed with the optimizer."""
    shapes = ((400, 260), SMALL)  # the first above the size bitsandbytes pages
    cpu = params(shapes=shapes)
    ps = [torch.nn.Parameter(p.detach().cuda()) for p in cpu]
    ps2 = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    paged_opt, plain = bnb.optim.PagedAdamW8bit(ps), bnb.optim.AdamW8bit(ps2)
    for step in range(3):
        set_grads(cpu, step)
        for p, q, c in zip(ps, ps2, cpu):
            p.grad, q.grad = c.grad.cuda(), c.grad.cuda()
        before = torch.cuda.memory_allocated()
        paged_opt.step()
        if step == 0:  # the large parameter's two 8-bit states: none of them from torch's allocator
            assert torch.cuda.memory_allocated() - before < ps[0].numel()
        plain.step()
    big = paged_opt.state[ps[0]]
    assert paged._live[big["state1"].data_ptr()] == (ps[0].device.index, ps[0].numel())
    assert paged._live[big["state2"].data_ptr()] == (ps[0].device.index, ps[0].numel())
    assert paged_opt.state[ps[1]]["state1"].data_ptr() not in paged._live  # small: ordinary memory
    for p, q in zip(ps, ps2):
        assert torch.equal(p, q)
        assert_same_state(paged_opt.state[p], plain.state[q])
    live = len(paged._live)
    del paged_opt, big
    gc.collect()
    assert len(paged._live) == live - 2  # freed with the optimizer


def test_prefetch_stays_within_the_free_memory_of_the_step(monkeypatch):
    """Paged state is prefetched whole or not at all, within what each device had free when the step began
    (queried once); tensors that are not a whole live managed allocation (ordinary memory, a part, a copy) are
    passed over. No GPU needed: the allocations, queries and prefetches are stubbed."""
    tensors = [torch.zeros(n, dtype=torch.uint8) for n in (600, 500, 400, 900, 100, 50)]
    live = {t.data_ptr(): (index, t.numel()) for t, index in zip(tensors[:4], (0, 0, 0, 1))}
    live[tensors[5].data_ptr()] = (0, 60)  # the tensor is only part of its allocation
    monkeypatch.setattr(paged, "_live", live)
    queries, prefetched = [], []
    fetch = paged.Prefetcher(free_bytes=lambda index: queries.append(index) or 1000,
                             prefetch=lambda index, address, nbytes: prefetched.append((index, address, nbytes)))
    fetch(tensors + [tensors[0].clone(), None])  # the fifth is ordinary memory, the clone a copy
    assert queries == [0, 1]
    want = [(0, tensors[0].data_ptr(), 600), (0, tensors[2].data_ptr(), 400), (1, tensors[3].data_ptr(), 900)]
    assert prefetched == want  # 500 no longer fits beside 600


# --------------------------------------------------------------------------------------------------------------------
# Argument errors: the optimizer, the argument, the value, what was expected.

O = bnb.optim
ARGUMENT_ERRORS = [
    (lambda ps: O.Adam8bit(ps, lr=-1e-3), ValueError, r"Adam8bit: lr must be a finite number >= 0, got -0.001"),
    (lambda ps: O.AdamW(ps, lr=float("nan")), ValueError, r"AdamW: lr must be a finite number >= 0, got nan"),
    (lambda ps: O.Adam8bit(ps, betas=(1.5, 0.999)), ValueError, r"Adam8bit: betas\[0\] must be in \[0, 1\), got 1.5"),
    (lambda ps: O.AdamW8bit(ps, betas=(0.9, -0.1)), ValueError, r"AdamW8bit: betas\[1\] must be in \[0, 1\), got -0.1"),
    (lambda ps: O.Adam(ps, betas="(0.9, 1.0)"), ValueError, r"Adam: betas\[1\] must be in \[0, 1\), got 1.0"),
    (lambda ps: O.Adam(ps, betas=(0.9, 0.99, 0.999)), ValueError,
     r"Adam: betas must hold 2 values \(betas\[0\], betas\[1\]\), got \(0.9, 0.99, 0.999\)"),
    (lambda ps: O.AdEMAMix(ps, betas=(0.9, 0.999)), ValueError, r"AdEMAMix: betas must hold 3 values"),
    (lambda ps: O.Adam(ps, eps=-1e-8), ValueError, r"Adam: eps must be a finite number >= 0, got -1e-08"),
    (lambda ps: O.Lion(ps, weight_decay=-0.1), ValueError, r"Lion: weight_decay must be a finite number >= 0"),
    (lambda ps: O.Adam(ps, optim_bits=16), ValueError, r"Adam: optim_bits must be 8 or 32, got 16"),
    (lambda ps: O.Adam8bit(ps, optim_bits=8), ValueError, r"Adam8bit: optim_bits is fixed at 8 for Adam8bit; leave "
     r"it at its default 32, got 8"),
    (lambda ps: O.Adam32bit(ps, optim_bits=8), ValueError,
     r"Adam32bit: optim_bits is fixed at 32 for Adam32bit; leave it at its default 32, got 8"),
    (lambda ps: O.Adagrad8bit(ps, optim_bits=32), ValueError, r"Adagrad8bit: optim_bits is fixed at 8"),
    (lambda ps: O.Adam(ps, amsgrad=True), ValueError, r"Adam: amsgrad=True is not supported"),
    (lambda ps: O.AdamW8bit(ps, block_wise=False), ValueError, r"AdamW8bit: block_wise=False .* is not supported"),
    (lambda ps: O.Adam(ps, percentile_clipping=101), ValueError,
     r"Adam: percentile_clipping must be an int in \[0, 100\] \(100: off\), got 101"),
    (lambda ps: O.Adam(ps, min_8bit_size=-1), ValueError, r"Adam: min_8bit_size must be an int >= 0, got -1"),
    (lambda ps: O.SGD(ps, 0.1), NotImplementedError, r"SGD: momentum must be > 0"),
    (lambda ps: O.SGD8bit(ps, 0.1, momentum=0.9, dampening=0.1), ValueError, r"SGD8bit: dampening must be 0"),
    (lambda ps: O.SGD(ps, 0.1, momentum=0.9, nesterov=True), ValueError, r"SGD: nesterov=True is not supported"),
    (lambda ps: O.SGD(ps, 0.1, momentum=1.5), ValueError, r"SGD: momentum must be in \[0, 1\), got 1.5"),
    (lambda ps: O.LARS(ps, -0.1, momentum=0.9), ValueError, r"LARS: lr must be a finite number >= 0, got -0.1"),
    (lambda ps: O.LARS(ps, 0.1, momentum=0.9, max_unorm=-1.0), ValueError, r"LARS: max_unorm must be a finite"),
    (lambda ps: O.RMSprop(ps, alpha=0), NotImplementedError, r"RMSprop: alpha must be in \(0, 1\)"),
    (lambda ps: O.RMSprop8bit(ps, alpha=1.0), ValueError, r"RMSprop8bit: alpha must be in \[0, 1\), got 1.0"),
    (lambda ps: O.RMSprop(ps, centered=True), NotImplementedError, r"RMSprop: centered=True is not supported"),
    (lambda ps: O.RMSprop(ps, momentum=0.9), ValueError, r"RMSprop: momentum must be 0"),
    (lambda ps: O.Adagrad(ps, lr_decay=0.1), ValueError, r"Adagrad: lr_decay must be 0"),
    (lambda ps: O.Adagrad(ps, initial_accumulator_value=0.1), ValueError,
     r"Adagrad: initial_accumulator_value must be 0"),
    (lambda ps: O.LAMB(ps, bias_correction=False), ValueError, r"LAMB: bias_correction=False is not supported"),
    (lambda ps: O.LAMB(ps, adam_w_mode=False), ValueError, r"LAMB: adam_w_mode=False is not supported"),
    (lambda ps: O.LAMB8bit(ps, max_unorm=0.5), ValueError, r"LAMB8bit: max_unorm must stay 1.0"),
    (lambda ps: O.AdEMAMix(ps, alpha=-1.0), ValueError, r"AdEMAMix: alpha must be a finite number >= 0, got -1.0"),
    (lambda ps: O.AdEMAMix8bit(ps, t_alpha=0), ValueError,
     r"AdEMAMix8bit: t_alpha must be None or a number of steps > 0, got 0"),
    (lambda ps: O.Optimizer2State("adam", ps, t_beta3=10), ValueError,
     r"Optimizer2State: t_alpha and t_beta3 schedule AdEMAMix"),
    (lambda ps: O.Optimizer1State("adam", ps), ValueError,
     r"Optimizer1State: optimizer_name 'adam' is not a one-state optimizer"),
]


@pytest.mark.parametrize("case", range(len(ARGUMENT_ERRORS)))
def test_argument_errors(case):
    make, error, message = ARGUMENT_ERRORS[case]
    with pytest.raises(error, match=r"^bnb\.optim\." + message):
        make(params())


def test_sparse_gradients_are_refused():
    emb = torch.nn.Embedding(100, 50, sparse=True)
    opt = bnb.optim.Adam8bit(emb.parameters())
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match=r"Adam8bit: sparse gradients are not supported \(parameter of shape "
                                         r"\[100, 50\]\)"):
        opt.step()


def test_percentile_clipping_argument_errors():
    g = torch.randn(10)
    with pytest.raises(ValueError, match=r"gnorm_vec must be a float32 tensor of shape \[100\], got a float32 tensor "
                                         r"of shape \[99\]"):
        F.percentile_clipping(g, torch.zeros(99), 1)
    with pytest.raises(ValueError, match=r"percentile must be an int in \[0, 100\), got 100"):
        F.percentile_clipping(g, torch.zeros(100), 1, percentile=100)
    with pytest.raises(ValueError, match=r"step counts from 1, got 0"):
        F.percentile_clipping(g, torch.zeros(100), 0)


def test_closure_and_param_groups():
    """step(closure) returns the closure's loss; a group's own lr applies to its parameters (lr 0: unchanged)."""
    a, b = params()
    opt = bnb.optim.AdamW8bit([{"params": [a], "lr": 0.0}, {"params": [b]}], lr=1e-2)

    def closure():
        opt.zero_grad()
        loss = (a.square().sum() + b.square().sum())
        loss.backward()
        return loss

    a0, b0 = a.detach().clone(), b.detach().clone()
    loss = opt.step(closure)
    assert loss.item() == pytest.approx((a0.square().sum() + b0.square().sum()).item())
    assert torch.equal(a, a0) and not torch.equal(b, b0)


# --------------------------------------------------------------------------------------------------------------------
# torch.compile: the update is one node of the captured graph, and compiled training equals eager bit for bit.

@pytest.mark.parametrize("name", ["AdamW8bit", "LAMB"])  # LAMB's trust ratio reads ||p|| (.item(): a graph break)
def test_compiled_training_step_equals_eager(name):
    graphs = []

    def count_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def run(compiled):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
        opt = getattr(bnb.optim, name)(model.parameters(), lr=1e-2)
        x, y = torch.randn(32, 64), torch.randn(32, 1)

        def train_step():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        step = torch.compile(train_step, backend=count_backend, fullgraph=False) if compiled else train_step
        losses = [step().item() for _ in range(4)]
        return model, opt, losses

    torch._dynamo.reset()
    eager_model, eager_opt, eager_losses = run(False)
    model, opt, losses = run(True)
    torch._dynamo.reset()
    assert losses == eager_losses
    for p, q in zip(model.parameters(), eager_model.parameters()):
        assert torch.equal(p, q)
        assert_same_state(opt.state[p], eager_opt.state[q])
    if name == "AdamW8bit":
        assert opt.state[model[0].weight]["state1"].dtype == torch.uint8
    calls = [n for gm in graphs for n in gm.graph.nodes
             if n.op == "call_function" and re.search(r"bnb\.optimizer_update_(32bit|8bit_blockwise)", str(n.target))]
    n_updates = 4 * len(list(model.parameters()))
    if name == "AdamW8bit":  # every update of every step was captured, each as one call of the op
        assert len(calls) == n_updates
    else:  # after each graph break, dynamo specializes on the parameter and the step (an int argument of the op)
        # and stops compiling that frame at its recompile limit: the first updates are captured, the rest run eagerly
        assert 4 <= len(calls) < n_updates
    for n in calls:
        assert isinstance(n.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))
