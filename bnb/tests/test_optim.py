"""bnb.optim's numerics against independent references: torch.optim (Adam, AdamW, SGD with momentum, RMSprop,
Adagrad) for 32-bit state within float rounding and for 8-bit state within bitsandbytes' published tolerances for its
own 8-bit optimizers (tests/test_optim.py there: states mostly within atol 3e-3 / rtol 1e-3, mean absolute parameter
error < 6e-5 and mean relative < 6e-4 per step); Lion, AdEMAMix, LAMB and LARS against plain-torch definitions
written here (and PytorchLARS); every optimizer against the op definition (bnb.reference.optim) driven step by step
with the hyperparameters it should pass, bit for bit; percentile clipping against a simulation of bitsandbytes'
rule; and a small model trained with AdamW8bit against torch's AdamW."""

import math

import pytest
import torch

import bnb
from bnb import functional as F
from bnb.reference import optim as ref

SHAPE = (96, 131)  # 12576 elements: 8-bit state (>= min_8bit_size), 50 blocks of 256 with a partial last one


def grads(steps, shape=SHAPE, seed=0, scale=0.01, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g) * scale).to(dtype) for _ in range(steps)]


def start(shape=SHAPE, seed=1, dtype=torch.float32):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 0.1).to(dtype)


def dequant(state, key, qmap, absmax):
    codes, scales = state[key], state[absmax]
    if scales.dim() == 2:  # AdEMAMix: [m1, m2], a row of scales each
        return torch.stack([F.dequantize_blockwise(codes[h], absmax=scales[h], code=state[qmap], blocksize=256)
                            for h in range(2)])
    return F.dequantize_blockwise(codes, absmax=scales, code=state[qmap], blocksize=256)


# --------------------------------------------------------------------------------------------------------------------
# Plain-torch definitions (float32, one parameter), independent of bnb's kernels.

class PlainLion(torch.optim.Optimizer):
    """Lion as its paper and lion-pytorch define it, decoupled weight decay."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(torch.sign(m * b1 + p.grad * (1 - b1)), alpha=-group["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


class PlainAdEMAMix(torch.optim.Optimizer):
    """AdEMAMix (arXiv:2409.03137, Algorithm 1) with the paper's alpha and beta3 schedulers."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, eps=1e-8, weight_decay=1e-2,
                 t_alpha=None, t_beta3=None):
        super().__init__(params, dict(lr=lr, betas=betas, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      t_alpha=t_alpha, t_beta3=t_beta3))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2, b3 = group["betas"]
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["step"], st["m1_m2"], st["nu"] = 0, p.new_zeros((2, *p.shape)), torch.zeros_like(p)
                st["step"] += 1
                t = st["step"]
                alpha = group["alpha"] if group["t_alpha"] is None else min(t * group["alpha"] / group["t_alpha"],
                                                                            group["alpha"])
                if group["t_beta3"] is not None:  # the half-life of m2 grows linearly from beta1's to beta3's
                    s = t / group["t_beta3"]
                    half = lambda b: math.log(0.5) / math.log(b)  # noqa: E731
                    b3 = min(0.5 ** (1 / ((1 - s) * half(b1) + s * half(b3))), b3)
                m1, m2 = st["m1_m2"]
                m1.mul_(b1).add_(p.grad, alpha=1 - b1)
                m2.mul_(b3).add_(p.grad, alpha=1 - b3)
                st["nu"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = st["nu"].sqrt() / math.sqrt(1 - b2 ** t) + group["eps"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.sub_(group["lr"] * (m1 / (1 - b1 ** t) + alpha * m2) / denom)


def plain_lamb(p, grads_, lr, betas, eps, weight_decay, max_unorm):
    """LAMB as bitsandbytes defines it, in float64: AdamW whose bias-corrected update u = m^ / (sqrt(v^) + eps) is
    scaled to max_unorm * ||p|| (p before the step) where ||u|| is larger (max_unorm 0: never)."""
    p = p.double().clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    b1, b2 = betas
    for t, g in enumerate(grads_, 1):
        g = g.double()
        m = m * b1 + g * (1 - b1)
        v = v * b2 + g * g * (1 - b2)
        u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
        limit = max_unorm * p.norm()
        clip = limit / u.norm() if 0 < limit < u.norm() else 1.0
        p = p * (1 - lr * weight_decay) - lr * clip * u
    return p


# --------------------------------------------------------------------------------------------------------------------
# 32-bit state: torch.optim within float rounding.

TORCH_32BIT = {
    "Adam": (lambda ps: bnb.optim.Adam(ps, lr=1e-3), lambda ps: torch.optim.Adam(ps, lr=1e-3),
             [("exp_avg", "state1"), ("exp_avg_sq", "state2")]),
    "AdamW": (lambda ps: bnb.optim.AdamW32bit(ps, lr=1e-2, weight_decay=0.1),
              lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
              [("exp_avg", "state1"), ("exp_avg_sq", "state2")]),
    "SGD": (lambda ps: bnb.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01),
            lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01),
            [("momentum_buffer", "state1")]),
    "RMSprop": (lambda ps: bnb.optim.RMSprop32bit(ps, lr=1e-3, alpha=0.9, weight_decay=0.01),
                lambda ps: torch.optim.RMSprop(ps, lr=1e-3, alpha=0.9, weight_decay=0.01),
                [("square_avg", "state1")]),
    "Adagrad": (lambda ps: bnb.optim.Adagrad(ps, lr=1e-2, eps=1e-10),
                lambda ps: torch.optim.Adagrad(ps, lr=1e-2, eps=1e-10), [("sum", "state1")]),
}


@pytest.mark.parametrize("name", list(TORCH_32BIT))
def test_32bit_state_follows_torch_optim(name):
    make_bnb, make_torch, states = TORCH_32BIT[name]
    p1 = start().requires_grad_()
    p2 = p1.detach().clone().requires_grad_()
    ours, theirs = make_bnb([p1]), make_torch([p2])
    for g in grads(40, scale=0.1):
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        for theirs_key, our_key in states:
            assert ours.state[p1][our_key].dtype == torch.float32
            torch.testing.assert_close(ours.state[p1][our_key], theirs.state[p2][theirs_key], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5)
    assert not torch.equal(p1, start())  # it moved


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_32bit_state_16bit_params_follow_torch_optim(dtype):
    """bitsandbytes' check for 16-bit parameters: the 32-bit states stay within 1e-3 / 1e-2 of torch's (run on
    float32 copies), the parameters are put back in step after each update as they diverge by their rounding."""
    p16 = start(dtype=dtype).requires_grad_()
    p32 = p16.detach().float().requires_grad_()
    ours, theirs = bnb.optim.AdamW([p16], lr=1e-3), torch.optim.AdamW([p32], lr=1e-3)
    for g in grads(20, dtype=dtype):
        p16.grad, p32.grad = g.clone(), g.float()
        ours.step()
        theirs.step()
        torch.testing.assert_close(ours.state[p16]["state1"], theirs.state[p32]["exp_avg"], atol=1e-3, rtol=1e-2)
        torch.testing.assert_close(ours.state[p16]["state2"], theirs.state[p32]["exp_avg_sq"], atol=1e-3, rtol=1e-2)
        torch.testing.assert_close(p16.float(), p32, atol=1e-3, rtol=1e-2)
        with torch.no_grad():
            p32.copy_(p32.to(dtype).float())
            p16.copy_(p32)


# --------------------------------------------------------------------------------------------------------------------
# 8-bit state: bitsandbytes' tolerances for its own 8-bit optimizers.

TORCH_8BIT = {
    "Adam8bit": (lambda ps: bnb.optim.Adam8bit(ps), lambda ps: torch.optim.Adam(ps),
                 [("exp_avg", "state1", "qmap1", "absmax1"), ("exp_avg_sq", "state2", "qmap2", "absmax2")]),
    "AdamW8bit": (lambda ps: bnb.optim.AdamW8bit(ps), lambda ps: torch.optim.AdamW(ps),
                  [("exp_avg", "state1", "qmap1", "absmax1"), ("exp_avg_sq", "state2", "qmap2", "absmax2")]),
    "PagedAdamW8bit": (lambda ps: bnb.optim.PagedAdamW8bit(ps), lambda ps: torch.optim.AdamW(ps),
                       [("exp_avg", "state1", "qmap1", "absmax1"), ("exp_avg_sq", "state2", "qmap2", "absmax2")]),
    "SGD8bit": (lambda ps: bnb.optim.SGD8bit(ps, 0.01, 0.9), lambda ps: torch.optim.SGD(ps, 0.01, 0.9),
                [("momentum_buffer", "state1", "qmap1", "absmax1")]),
    "RMSprop8bit": (lambda ps: bnb.optim.RMSprop8bit(ps, 0.01, 0.9), lambda ps: torch.optim.RMSprop(ps, 0.01, 0.9),
                    [("square_avg", "state1", "qmap1", "absmax1")]),
    "Adagrad8bit": (lambda ps: bnb.optim.Adagrad8bit(ps, lr=1e-3), lambda ps: torch.optim.Adagrad(ps, lr=1e-3),
                    [("sum", "state1", "qmap1", "absmax1")]),
    "Lion8bit": (lambda ps: bnb.optim.Lion8bit(ps), lambda ps: PlainLion(ps), [("exp_avg", "state1", "qmap1",
                                                                                  "absmax1")]),
    "AdEMAMix8bit": (lambda ps: bnb.optim.AdEMAMix8bit(ps), lambda ps: PlainAdEMAMix(ps),
                     [("m1_m2", "state1", "qmap1", "absmax1"), ("nu", "state2", "qmap2", "absmax2")]),
    "AdEMAMix8bit_scheduled": (lambda ps: bnb.optim.AdEMAMix8bit(ps, t_alpha=100, t_beta3=100),
                               lambda ps: PlainAdEMAMix(ps, t_alpha=100, t_beta3=100),
                               [("m1_m2", "state1", "qmap1", "absmax1"), ("nu", "state2", "qmap2", "absmax2")]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(TORCH_8BIT))
def test_8bit_state_within_bitsandbytes_tolerances(name, dtype):
    make_bnb, make_torch, states = TORCH_8BIT[name]
    p2 = start(dtype=dtype).requires_grad_()  # ours
    p1 = p2.detach().float().requires_grad_()  # the float32 reference
    ours, theirs = make_bnb([p2]), make_torch([p1])
    err_limit, rel_limit = (6e-5, 6e-4) if dtype == torch.float32 else (1.7e-4, 1.6e-3)
    for g in grads(50, dtype=dtype):
        p1.grad, p2.grad = g.float(), g.clone()
        theirs.step()
        ours.step()
        state = ours.state[p2]
        assert state["state1"].dtype == torch.uint8
        dequantized = []
        for theirs_key, our_key, qmap, absmax in states:
            s = dequant(state, our_key, qmap, absmax)
            assert (~torch.isclose(theirs.state[p1][theirs_key], s, atol=3e-3, rtol=1e-3)).sum() < 20
            dequantized.append((theirs_key, s))
        err = (p1 - p2.float()).abs()
        assert err.mean() < err_limit
        assert (err / (p1.abs() + 1e-9)).mean() < rel_limit
        with torch.no_grad():  # in step again (bitsandbytes' test does the same), states too
            p1.copy_(p1.to(dtype).float())
            p2.copy_(p1)
            for key, s in dequantized:
                theirs.state[p1][key].copy_(s)


# --------------------------------------------------------------------------------------------------------------------
# Lion, AdEMAMix, LAMB and LARS with 32-bit state against the plain-torch definitions.

def test_lion_32bit_follows_its_definition():
    p1 = start().requires_grad_()
    p2 = p1.detach().clone().requires_grad_()
    ours, theirs = bnb.optim.Lion([p1], lr=1e-3, weight_decay=0.1), PlainLion([p2], lr=1e-3, weight_decay=0.1)
    for g in grads(20):
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        # sign() of a value within rounding of 0 may differ: a few elements, as bitsandbytes' test allows (15)
        assert (~torch.isclose(p1, p2, atol=1e-6, rtol=1e-5)).sum() <= 15
        torch.testing.assert_close(ours.state[p1]["state1"], theirs.state[p2]["exp_avg"], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("schedule", [None, 10])
def test_ademamix_32bit_follows_its_definition(schedule):
    p1 = start().requires_grad_()
    p2 = p1.detach().clone().requires_grad_()
    ours = bnb.optim.AdEMAMix([p1], lr=1e-3, t_alpha=schedule, t_beta3=schedule)
    theirs = PlainAdEMAMix([p2], lr=1e-3, t_alpha=schedule, t_beta3=schedule)
    for g in grads(20, scale=0.1):
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        assert ours.state[p1]["state1"].shape == (2, *SHAPE)
        torch.testing.assert_close(ours.state[p1]["state1"], theirs.state[p2]["m1_m2"], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(ours.state[p1]["state2"], theirs.state[p2]["nu"], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("max_unorm", [1e-3, 1e3])  # clips at every step (||u|| / ||p|| is about 10), and never
def test_lamb_32bit_follows_its_definition(max_unorm):
    p0 = start()
    p = p0.clone().requires_grad_()
    opt = bnb.optim.LAMB([p], lr=1e-2, weight_decay=0.01, max_unorm=max_unorm)
    steps = grads(15, scale=0.1)
    for g in steps:
        p.grad = g.clone()
        opt.step()
    want = plain_lamb(p0, steps, 1e-2, (0.9, 0.999), 1e-8, 0.01, max_unorm)
    torch.testing.assert_close(p.double(), want, atol=1e-6, rtol=1e-5)
    assert opt.state[p]["unorm_vec"].item() > 0
    # the trust ratio matters here: without it (max_unorm 0) the result is another
    other = plain_lamb(p0, steps, 1e-2, (0.9, 0.999), 1e-8, 0.01, 0.0 if max_unorm < 1 else 1e-3)
    assert not torch.allclose(other, want, atol=1e-4)


@pytest.mark.parametrize("max_unorm", [0.001, 0.0])
def test_lars_32bit_follows_pytorch_lars(max_unorm):
    p1 = start().requires_grad_()
    p2 = p1.detach().clone().requires_grad_()
    ours = bnb.optim.LARS([p1], lr=0.1, momentum=0.9, weight_decay=0.01, max_unorm=max_unorm)
    theirs = bnb.optim.PytorchLARS([p2], lr=0.1, momentum=0.9, weight_decay=0.01, max_unorm=max_unorm)
    plain = torch.optim.SGD([p3 := p1.detach().clone().requires_grad_()], lr=0.1, momentum=0.9, weight_decay=0.01)
    for g in grads(20, scale=0.1):
        p1.grad, p2.grad, p3.grad = g.clone(), g.clone(), g.clone()
        ours.step()
        theirs.step()
        plain.step()
        torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5)
    assert torch.allclose(p1, p3, atol=1e-6) == (max_unorm == 0.0)  # the trust ratio clipped (or was off)


def test_lars_trust_ratio_limits_the_step():
    """From a zero state the first LARS update is lr * g: clipped, its norm is lr * max_unorm * ||p||."""
    p = start().requires_grad_()
    before = p.detach().clone()
    opt = bnb.optim.LARS32bit([p], lr=0.5, momentum=0.9, max_unorm=0.02)
    p.grad = grads(1, scale=1.0)[0]
    opt.step()
    assert (p.detach() - before).norm().item() == pytest.approx(0.5 * 0.02 * before.norm().item(), rel=1e-5)
    assert opt.state[p]["unorm_vec"].item() == pytest.approx((p.grad.double() ** 2).sum().item(), rel=1e-5)


# --------------------------------------------------------------------------------------------------------------------
# Every optimizer against the op definition, driven with the hyperparameters it must pass: bit for bit.

def ref_step(name, p, g, st, step, lr, beta1, beta2, beta3, alpha, eps, wd, max_unorm, gnorm_scale=1.0):
    """One update of p (in place) and st (dict of the state) by bnb.reference.optim."""
    if st["state1"].dtype == torch.float32:
        norm = torch.linalg.vector_norm(p.float()).item() if max_unorm > 0 else 0.0
        ref.optimizer_update_32bit(name, g, p, st["state1"], st.get("state2"), st.get("unorm_vec"), max_unorm, norm,
                                   beta1, beta2, beta3, alpha, eps, wd, step, lr, gnorm_scale)
    else:
        ref.optimizer_update_8bit_blockwise(name, g, p, st["state1"], st.get("state2"), beta1, beta2, beta3, alpha,
                                            eps, step, lr, st["qmap1"], st.get("qmap2"), st["absmax1"],
                                            st.get("absmax2"), wd, gnorm_scale)


# (optimizer, op name, (lr, beta1, beta2, beta3(step), alpha(step), eps, weight_decay, max_unorm) it must pass)
DRIVEN = [
    (lambda ps: bnb.optim.Adam8bit(ps, lr=2e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), "adam",
     (2e-3, 0.8, 0.99, 0.0, 0.0, 1e-6, 0.1, 0.0)),
    (lambda ps: bnb.optim.AdamW(ps, lr=2e-3), "adam", (2e-3, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, 0.0)),
    (lambda ps: bnb.optim.LAMB8bit(ps, lr=2e-3, weight_decay=0.1), "lamb", (2e-3, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.1,
                                                                            0.0)),
    (lambda ps: bnb.optim.LAMB32bit(ps, lr=2e-3, max_unorm=0.01), "lamb", (2e-3, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.0,
                                                                           0.01)),
    (lambda ps: bnb.optim.AdEMAMix8bit(ps, lr=2e-3, t_alpha=5, t_beta3=5), "ademamix",
     (2e-3, 0.9, 0.999, lambda t: bnb.optim.ademamix.scheduled_beta3(t, 0.9, 0.9999, 5),
      lambda t: min(t * 5.0 / 5, 5.0), 1e-8, 0.01, 0.0)),
    (lambda ps: bnb.optim.AdEMAMix32bit(ps, lr=2e-3, alpha=2.0), "ademamix",
     (2e-3, 0.9, 0.999, 0.9999, 2.0, 1e-8, 0.01, 0.0)),
    (lambda ps: bnb.optim.SGD8bit(ps, 0.05, momentum=0.8, weight_decay=0.01), "momentum",
     (0.05, 0.8, 0.0, 0.0, 0.0, 0.0, 0.01, 0.0)),
    (lambda ps: bnb.optim.LARS(ps, 0.05, momentum=0.8), "lars", (0.05, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.02)),
    (lambda ps: bnb.optim.LARS8bit(ps, 0.05, momentum=0.8), "lars", (0.05, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    (lambda ps: bnb.optim.Lion32bit(ps, lr=1e-3, betas=(0.95, 0.98), weight_decay=0.1), "lion",
     (1e-3, 0.95, 0.98, 0.0, 0.0, 0.0, 0.1, 0.0)),
    (lambda ps: bnb.optim.PagedLion8bit(ps, lr=1e-3), "lion", (1e-3, 0.9, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0)),
    (lambda ps: bnb.optim.RMSprop8bit(ps, lr=1e-3, alpha=0.95, eps=1e-6), "rmsprop",
     (1e-3, 0.95, 0.0, 0.0, 0.0, 1e-6, 0.0, 0.0)),
    (lambda ps: bnb.optim.Adagrad32bit(ps, lr=1e-2, weight_decay=0.01), "adagrad",
     (1e-2, 0.0, 0.0, 0.0, 0.0, 1e-10, 0.01, 0.0)),
    (lambda ps: bnb.optim.Adagrad8bit(ps, lr=1e-2), "adagrad", (1e-2, 0.0, 0.0, 0.0, 0.0, 1e-10, 0.0, 0.0)),
]


@pytest.mark.parametrize("case", range(len(DRIVEN)))
def test_each_optimizer_equals_the_op_definition(case):
    make, name, (lr, b1, b2, b3, alpha, eps, wd, max_unorm) = DRIVEN[case]
    p = start(dtype=torch.bfloat16).requires_grad_()
    opt = make([p])
    want_p, want_state = None, None
    for step, g in enumerate(grads(6, scale=0.1, dtype=torch.bfloat16), 1):
        if want_p is None:
            p.grad = g
            want_p = p.detach().clone()
            opt.step()  # makes the state; the same start state for the definition:
            want_state = {k: torch.zeros_like(v) if k not in ("qmap1", "qmap2") else v.clone()
                          for k, v in opt.state[p].items() if isinstance(v, torch.Tensor)}
        else:
            p.grad = g
            opt.step()
        ref_step(name, want_p, g, want_state, step, lr, b1, b2, b3(step) if callable(b3) else b3,
                 alpha(step) if callable(alpha) else alpha, eps, wd, max_unorm)
        assert opt.state[p]["step"] == step
        if max_unorm > 0:  # the update norm is a float64 sum in any order
            torch.testing.assert_close(p.detach(), want_p, atol=0, rtol=1e-2)  # bfloat16: within a rounding
            for k, v in want_state.items():
                torch.testing.assert_close(opt.state[p][k], v, atol=1e-7, rtol=1e-5)
        else:
            assert torch.equal(p.detach().view(torch.int16), want_p.view(torch.int16))
            for k, v in want_state.items():
                assert torch.equal(opt.state[p][k], v), k


# --------------------------------------------------------------------------------------------------------------------
# Percentile clipping, as bitsandbytes defines it.

def simulate_percentile_clipping(norms_squared, percentile):
    """gnorm_scale of each step by bitsandbytes' rule, in float64: a 100-slot history of squared norms, all slots
    set to the first; step t writes slot t % 100; clip = sqrt of the percentile-th smallest; scale = clip / norm
    where the norm is larger."""
    history, scales = [0.0] * 100, []
    for t, sq in enumerate(norms_squared, 1):
        if t == 1:
            history = [sq] * 100
        history[t % 100] = sq
        clip = math.sqrt(sorted(history)[percentile])
        scales.append(clip / math.sqrt(sq) if math.sqrt(sq) > clip else 1.0)
    return scales


def spiky_grads(steps, seed=3):
    gs = grads(steps, shape=(1000,), seed=seed, scale=1.0)
    return [g * (1 + 10 * (t % 17 == 5) + 0.01 * t) for t, g in enumerate(gs)]


def test_percentile_clipping_follows_bitsandbytes_rule():
    gs = spiky_grads(130)
    want = simulate_percentile_clipping([(g.double() ** 2).sum().item() for g in gs], percentile=5)
    gnorm_vec = torch.zeros(100)
    got = []
    for t, g in enumerate(gs, 1):
        norm, clip, scale = F.percentile_clipping(g, gnorm_vec, t, percentile=5)
        got.append(scale)
        assert norm.item() == pytest.approx(g.double().norm().item(), rel=1e-6)
    assert got == pytest.approx(want, rel=1e-6)
    assert sum(s < 1 for s in got) > 20  # it clipped: the spikes, and the norms drifting up


def test_percentile_clipping_scales_the_optimizers_gradient():
    gs = spiky_grads(30)
    scales = simulate_percentile_clipping([(g.double() ** 2).sum().item() for g in gs], percentile=10)
    p = torch.zeros(1000, requires_grad=True)
    opt = bnb.optim.Adam([p], lr=1e-2, percentile_clipping=10)
    want = p.detach().clone()
    st = {"state1": torch.zeros(1000), "state2": torch.zeros(1000)}
    for t, (g, scale) in enumerate(zip(gs, scales), 1):
        p.grad = g
        opt.step()
        ref_step("adam", want, g, st, t, 1e-2, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.0, 0.0, gnorm_scale=scale)
        torch.testing.assert_close(p.detach(), want, atol=1e-6, rtol=1e-5)
    assert opt.state[p]["gnorm_vec"].shape == (100,)
    assert min(scales) < 0.2  # the spikes were clipped hard


# --------------------------------------------------------------------------------------------------------------------
# A small model trains as with torch's AdamW.

def train(make_optimizer, steps=200, n=2048):
    """Full-batch regression (a smooth function of 16 inputs plus noise of variance 0.01) by a 16-256-1 MLP, seeded;
    the losses. The hidden layer's 4096 weights get 8-bit state, the rest 32-bit."""
    torch.manual_seed(0)
    x = torch.randn(n, 16)
    y = torch.sin(x[:, :4].sum(1, keepdim=True)) + 0.3 * x[:, 4:5] ** 2 + 0.1 * torch.randn(n, 1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
    opt = make_optimizer(model.parameters())
    losses = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matmuls: faster on one thread, above all on a busy machine
    try:
        for _ in range(steps):
            loss = torch.nn.functional.mse_loss(model(x), y)
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return losses, opt, model


def test_mlp_trains_with_adamw8bit_as_with_torch_adamw():
    ours, opt, model = train(lambda ps: bnb.optim.AdamW8bit(ps, lr=3e-3))
    theirs, _, _ = train(lambda ps: torch.optim.AdamW(ps, lr=3e-3))
    assert opt.state[model[0].weight]["state1"].dtype == torch.uint8  # 4096 elements: 8-bit state
    assert opt.state[model[2].weight]["state1"].dtype == torch.float32  # 256: 32-bit
    print("\nstep   torch.optim.AdamW   bnb.optim.AdamW8bit")
    for t in (0, 10, 25, 50, 100, 150, 199):
        print(f"{t:4d}   {theirs[t]:.5f}             {ours[t]:.5f}")
    assert theirs[-1] < 0.05 * theirs[0]  # learnt, still above the noise (0.01): the curves can be told apart
    assert ours[-1] < 0.05 * ours[0]
    for t in (25, 50, 100, 150, 199):
        assert abs(ours[t] - theirs[t]) < 0.15 * theirs[t], t
