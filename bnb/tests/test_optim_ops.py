"""Optimizer update ops: every kernel equals the pure-torch definition (bnb.reference.optim) bit for bit on every
device, for every optimizer, dtype and option; the definition itself agrees with torch.optim's Adam / AdamW, SGD,
RMSprop and Adagrad, and with hand-computed steps; bad input is a clear error that leaves everything as it was."""

import re

import pytest
import torch

import bnb
from bnb.reference import blockwise8
from bnb.reference import optim as ref
from helpers import FLOAT_DTYPES, assert_same_bits, devices

ops = torch.ops.bnb
OPTIMIZERS = ref.TWO_STATE + ref.ONE_STATE
SIGNED = torch.linspace(-1, 1, 256)  # stand-ins for bitsandbytes' dynamic maps: any sorted codebook works
UNSIGNED = torch.linspace(0, 1, 256)


def grads(n, dtype, seed, zeros=True):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=g).to(dtype)
    grad = (torch.randn(n, generator=g) * 0.5).to(dtype)
    if zeros:
        grad[::5] = 0
    return g, p, grad


def states32(name, n, gen):
    count = 2 * n if name == "ademamix" else n
    s1 = torch.randn(count, generator=gen) * 0.1
    if name in ("rmsprop", "adagrad"):
        s1 = s1.abs()
    s2 = torch.rand(n, generator=gen) * 0.01 if name in ref.TWO_STATE else None
    return s1, s2


def states8(name, n, gen):
    s1, s2 = states32(name, n, gen)
    qmap1 = UNSIGNED if name in ("rmsprop", "adagrad") else SIGNED
    halves = 2 if name == "ademamix" else 1
    q1, a1 = zip(*(blockwise8.quantize_blockwise(h, qmap1, ref.BLOCKSIZE) for h in s1.view(halves, -1)))
    q1, a1 = torch.cat(q1), torch.stack(a1)
    q2 = a2 = None
    if s2 is not None:
        q2, a2 = blockwise8.quantize_blockwise(s2, UNSIGNED, ref.BLOCKSIZE)
    return q1, q2, qmap1, a1.view(-1) if halves == 1 else a1, a2


def clone(xs, device):
    return [x.clone().to(device) if isinstance(x, torch.Tensor) else x for x in xs]


def assert_all_same(got, want):
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert_same_bits(g.cpu(), w)


def run32(fn, name, g, p, s1, s2, unorm, max_unorm=0.0, wd=0.01, step=3, skip_zeros=False, beta1=0.9):
    fn(name, g, p, s1, s2, unorm, max_unorm, 2.5, beta1, 0.999, 0.9999, 5.0, 1e-8, wd, step, 1e-3, 0.75,
       skip_zeros)


def run8(fn, name, g, p, q1, q2, qmap1, qmap2, a1, a2, wd=0.01, step=3, skip_zeros=False):
    fn(name, g, p, q1, q2, 0.9, 0.999, 0.9999, 5.0, 1e-8, step, 1e-3, qmap1, qmap2, a1, a2, wd, 0.75, skip_zeros)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1, 255, 4099])
def test_32bit_equals_the_definition(device, name, dtype, n):
    gen, p, g = grads(n, dtype, seed=n)
    s1, s2 = states32(name, n, gen)
    for step, wd, skip in ((1, 0.0, False), (3, 0.01, True), (7, 0.0, True)):
        want = clone([g, p, s1, s2], "cpu")
        got = clone([g, p, s1, s2], device)
        run32(ref.optimizer_update_32bit, name, *want, None, wd=wd, step=step, skip_zeros=skip)
        run32(ops.optimizer_update_32bit, name, *got, None, wd=wd, step=step, skip_zeros=skip)
        assert_all_same(got, want)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", [n for n in OPTIMIZERS if n != "ademamix"])
@pytest.mark.parametrize("max_unorm", [0.02, 1e6])  # clips, and does not
def test_32bit_trust_ratio_equals_the_definition(device, name, max_unorm):
    n = 3000
    gen, p, g = grads(n, torch.float32, seed=1)
    s1, s2 = states32(name, n, gen)
    for step in (1, 2):
        unorm = torch.tensor([4.0])
        want = clone([g, p, s1, s2, unorm], "cpu")
        got = clone([g, p, s1, s2, unorm], device)
        run32(ref.optimizer_update_32bit, name, *want, max_unorm=max_unorm, step=step)
        run32(ops.optimizer_update_32bit, name, *got, max_unorm=max_unorm, step=step)
        # The norm is a float64 sum in any order: equal to a float32 rounding or two, and so is the update.
        torch.testing.assert_close(got[4].cpu(), want[4], rtol=1e-6, atol=0)
        for a, b in zip(got[1:4], want[1:4]):
            if b is not None:
                torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-7)
        s1 = want[2]


def test_trust_ratio_clips_the_update_to_its_limit():
    """lars, one step from a zero state: the update is lr * g, clipped so its norm is max_unorm * param_norm."""
    n = 1000
    _, p, g = grads(n, torch.float64, seed=2, zeros=False)
    p32, g32 = p.float(), g.float()
    s1, unorm = torch.zeros(n), torch.zeros(1)
    max_unorm, param_norm, lr = 0.1, 2.0, 0.5
    before = p32.clone()
    ops.optimizer_update_32bit("lars", g32, p32, s1, None, unorm, max_unorm, param_norm, 0.9, 0.0, 0.0, 0.0, 1e-8,
                               0.0, 1, lr, 1.0)
    assert unorm.item() == pytest.approx((g * g).sum().item(), rel=1e-6)
    limit = max_unorm * param_norm + 1e-8
    update = (before.double() - p32.double())
    assert update.norm().item() == pytest.approx(lr * limit, rel=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1, 256, 5000])
def test_8bit_equals_the_definition(device, name, dtype, n):
    gen, p, g = grads(n, dtype, seed=n + 1)
    q1, q2, qmap1, a1, a2 = states8(name, n, gen)
    qmap2 = UNSIGNED if q2 is not None else None
    for step, wd, skip in ((1, 0.0, False), (3, 0.01, True)):
        want = clone([g, p, q1, q2, qmap1, qmap2, a1, a2], "cpu")
        got = clone([g, p, q1, q2, qmap1, qmap2, a1, a2], device)
        run8(ref.optimizer_update_8bit_blockwise, name, *want, wd=wd, step=step, skip_zeros=skip)
        run8(ops.optimizer_update_8bit_blockwise, name, *got, wd=wd, step=step, skip_zeros=skip)
        assert_all_same(got, want)


@pytest.mark.parametrize("name, dtype", [("adam", torch.float32), ("ademamix", torch.bfloat16)])
def test_8bit_large_tensor_equals_the_definition(name, dtype):
    """A tensor past the size where the CPU update requantizes a block at a time with prefetches (2^17 elements a
    thread's range), split over the threads torch runs."""
    n = (1 << 18) + 3 * 256 + 77
    gen, p, g = grads(n, dtype, seed=5)
    q1, q2, qmap1, a1, a2 = states8(name, n, gen)
    qmap2 = UNSIGNED if q2 is not None else None
    want = clone([g, p, q1, q2, qmap1, qmap2, a1, a2], "cpu")
    got = clone([g, p, q1, q2, qmap1, qmap2, a1, a2], "cpu")
    run8(ref.optimizer_update_8bit_blockwise, name, *want, wd=0.01, step=3, skip_zeros=False)
    run8(ops.optimizer_update_8bit_blockwise, name, *got, wd=0.01, step=3, skip_zeros=False)
    assert_all_same(got, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the knob shapes the CUDA kernel; no CUDA device")
@pytest.mark.parametrize("per_thread", [1, 2, 4, 8])
@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n, offset", [(5000, 0), (256 * 40, 0), (1000, 1), (1000, 8)])
def test_8bit_cuda_kernel_shapes_equal_the_definition(per_thread, name, dtype, n, offset):
    # cuda.optim8_per_thread picks the kernel's elements per thread: 16-byte vectors where PER and the buffers
    # allow (offset 0), elements where not (offset 1: p, g and the codes misaligned; 8: p and g aligned for float32
    # only, the codes for PER <= 8), a partial last block (5000, 1000) or none (256 * 40).
    gen, p, g = grads(n, dtype, seed=n + per_thread)
    q1, q2, qmap1, a1, a2 = states8(name, n, gen)
    qmap2 = UNSIGNED if q2 is not None else None

    def shifted(t):  # t's values in a contiguous view `offset` elements into a larger buffer
        if t is None or offset == 0:
            return t
        buf = torch.zeros(t.numel() + offset, dtype=t.dtype, device=t.device)
        buf[offset:] = t
        return buf[offset:]

    for step, wd, skip in ((1, 0.0, False), (3, 0.01, True)):
        want = clone([g, p, q1, q2, qmap1, qmap2, a1, a2], "cpu")
        got = clone([g, p, q1, q2, qmap1, qmap2, a1, a2], "cuda")
        got[:4] = [shifted(t) for t in got[:4]]
        run8(ref.optimizer_update_8bit_blockwise, name, *want, wd=wd, step=step, skip_zeros=skip)
        with bnb.config.override(cuda__optim8_per_thread=per_thread):
            run8(ops.optimizer_update_8bit_blockwise, name, *got, wd=wd, step=step, skip_zeros=skip)
        assert_all_same(got, want)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("eight_bit", [False, True])
def test_non_contiguous_tensors_are_updated_in_place(device, eight_bit):
    n = 600
    gen, p, g = grads(2 * n, torch.float32, seed=3)
    p2, g2 = p.view(2, n).t(), g.view(2, n).t()  # [n, 2], not contiguous
    if eight_bit:
        q1, q2, qmap1, a1, a2 = states8("adam", 2 * n, gen)
        args = [g2, p2, q1.view(2, n).t(), q2.view(2, n).t(), qmap1, UNSIGNED, a1, a2]
        want = clone([x.contiguous() if isinstance(x, torch.Tensor) else x for x in args], "cpu")
        got = [x.to(device) if isinstance(x, torch.Tensor) else x for x in args]
        run8(ref.optimizer_update_8bit_blockwise, "adam", *want)
        run8(ops.optimizer_update_8bit_blockwise, "adam", *got)
    else:
        s1, s2 = states32("adam", 2 * n, gen)
        args = [g2, p2, s1.view(2, n).t(), s2.view(2, n).t()]
        want = clone([x.contiguous() for x in args], "cpu")
        got = [x.to(device) for x in args]
        run32(ref.optimizer_update_32bit, "adam", *want, None)
        run32(ops.optimizer_update_32bit, "adam", *got, None)
    assert not got[1].is_contiguous()
    assert_all_same(got, want)


# --- the definition against torch.optim and hand-computed steps ---

def steps_of(torch_opt_cls, kwargs, name, steps=20, eight_bit=False, **ours):
    n = 2000
    gen, p0, _ = grads(n, torch.float32, seed=4, zeros=False)
    mine = p0.clone()
    theirs = torch.nn.Parameter(p0.clone())
    opt = torch_opt_cls([theirs], **kwargs)
    s1, s2 = torch.zeros(2 * n if name == "ademamix" else n), torch.zeros(n) if name in ref.TWO_STATE else None
    for step in range(1, steps + 1):
        g = torch.randn(n, generator=gen)
        theirs.grad = g.clone()
        opt.step()
        ref.optimizer_update_32bit(name, g, mine, s1, s2, None, 0.0, 0.0, ours.get("beta1", 0.0),
                                   ours.get("beta2", 0.0), 0.0, 0.0, ours.get("eps", 0.0), ours.get("wd", 0.0), step,
                                   kwargs["lr"], 1.0)
    return mine, theirs.detach()


def test_adam_and_adamw_match_torch():
    mine, theirs = steps_of(torch.optim.AdamW, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
                            "adam", beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)


def test_momentum_matches_torch_sgd():
    mine, theirs = steps_of(torch.optim.SGD, dict(lr=0.01, momentum=0.9, weight_decay=0.001), "momentum",
                            beta1=0.9, wd=0.001)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


def test_rmsprop_matches_torch():
    mine, theirs = steps_of(torch.optim.RMSprop, dict(lr=1e-3, alpha=0.99, eps=1e-8), "rmsprop", beta1=0.99,
                            eps=1e-8)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


def test_adagrad_matches_torch():
    mine, theirs = steps_of(torch.optim.Adagrad, dict(lr=0.01, eps=1e-10), "adagrad", eps=1e-10)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


def test_hand_computed_steps():
    """One step of each optimizer on g = 0.5, p = 1, from zero states, no decay: the published update rules."""
    lr = 0.1
    expect = {  # step 1
        "adam": 1 - lr * 0.5 / (0.5 + 1e-8),  # m_hat = g, v_hat = g^2
        "momentum": 1 - lr * 0.5,
        "lion": 1 - lr,  # sign(0.1 * g) = 1
        "rmsprop": 1 - lr * 0.5 / (0.5 * 0.1 ** 0.5 + 1e-8),  # v = 0.1 * g^2 (beta1 = 0.9)
        "adagrad": 1 - lr * 0.5 / (0.5 + 1e-8),
    }
    for name, want in expect.items():
        p, g = torch.ones(1), torch.full((1,), 0.5)
        s1 = torch.zeros(1)
        s2 = torch.zeros(1) if name == "adam" else None
        ops.optimizer_update_32bit(name, g, p, s1, s2, None, 0.0, 0.0, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.0, 1, lr, 1.0)
        assert p.item() == pytest.approx(want, rel=1e-6), name


def test_ademamix_mixes_a_slow_average():
    """ademamix with alpha = 0 is adam's 8-bit form; alpha scales a second, slower average (beta3)."""
    n = 100
    _, p, g = grads(n, torch.float32, seed=5, zeros=False)
    pa, pm = p.clone(), p.clone()
    sa1, sa2 = torch.zeros(n), torch.zeros(n)
    sm1, sm2 = torch.zeros(2 * n), torch.zeros(n)
    ops.optimizer_update_32bit("ademamix", g, pm, sm1, sm2, None, 0.0, 0.0, 0.9, 0.999, 0.9999, 0.0, 1e-8, 0.0, 1,
                               1e-3, 1.0)
    c2 = (1 - 0.999) ** 0.5
    m = 0.1 * g
    v = 0.001 * g * g
    want = p - 1e-3 * ((m / 0.1) / (v.sqrt() / c2 + 1e-8))
    torch.testing.assert_close(pm, want, rtol=1e-6, atol=0)
    torch.testing.assert_close(sm1[n:], (1 - 0.9999) * g, rtol=1e-6, atol=0)


# --- bad input ---

def args32(name="adam", n=300, **over):
    gen, p, g = grads(n, torch.float32, seed=6)
    s1, s2 = states32(name, n, gen)
    a = dict(optimizer_name=name, g=g, p=p, state1=s1, state2=s2, unorm_vec=None, max_unorm=0.0, param_norm=0.0,
             beta1=0.9, beta2=0.999, beta3=0.0, alpha=0.0, eps=1e-8, weight_decay=0.0, step=1, lr=1e-3,
             gnorm_scale=1.0)
    a.update(over)
    return a


BAD32 = [
    (dict(optimizer_name="adamw"), "unknown optimizer 'adamw'; expected one of"),
    (dict(g=torch.zeros(300, dtype=torch.float16)), "g must have p's dtype float32, got float16"),
    (dict(g=torch.zeros(299)), "g must have p's 300 elements, got 299"),
    (dict(state1=torch.zeros(300, dtype=torch.float16)), "state1 must be float32"),
    (dict(state1=torch.zeros(301)), "state1 must hold 300 values, got 301"),
    (dict(state2=None), "adam needs state2"),
    (dict(state2=torch.zeros(3)), "state2 must hold 300 values, got 3"),
    (dict(optimizer_name="momentum"), "momentum keeps one state; state2 must be None"),
    (dict(step=0), "step counts from 1, got 0"),
    (dict(max_unorm=1.0), "max_unorm > 0 needs unorm_vec, one float32 value"),
    (dict(p=torch.zeros(300, dtype=torch.int32), g=torch.zeros(300, dtype=torch.int32)), "p must be"),
]


@pytest.mark.parametrize("over, message", BAD32)
@pytest.mark.parametrize("fn", [ops.optimizer_update_32bit, ref.optimizer_update_32bit], ids=["op", "reference"])
def test_bad_32bit_arguments_are_clear_errors_that_change_nothing(fn, over, message):
    a = args32(**over)
    before = {k: v.clone() for k, v in a.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(RuntimeError, match=re.escape(message)):
        fn(**a)
    for k, v in before.items():
        assert torch.equal(a[k], v), k


def test_ademamix_state1_holds_two_per_parameter():
    with pytest.raises(RuntimeError, match=re.escape("state1 must hold 600 values (two per parameter: ademamix)")):
        ops.optimizer_update_32bit(**args32("ademamix", state1=torch.zeros(300)))
    with pytest.raises(RuntimeError, match="not defined for ademamix"):
        ops.optimizer_update_32bit(**args32("ademamix", max_unorm=1.0, unorm_vec=torch.zeros(1)))


def args8(name="adam", n=300, **over):
    gen, p, g = grads(n, torch.float32, seed=7)
    q1, q2, qmap1, a1, a2 = states8(name, n, gen)
    a = dict(optimizer_name=name, g=g, p=p, state1=q1, state2=q2, beta1=0.9, beta2=0.999, beta3=0.0, alpha=0.0,
             eps=1e-8, step=1, lr=1e-3, qmap1=qmap1.clone(), qmap2=UNSIGNED.clone() if q2 is not None else None,
             absmax1=a1, absmax2=a2, weight_decay=0.0, gnorm_scale=1.0)
    a.update(over)
    return a


NAN_MAP = torch.linspace(-1, 1, 256)
NAN_MAP[3] = float("nan")
BAD8 = [
    (dict(state1=torch.zeros(300)), "state1 must be uint8"),
    (dict(qmap1=torch.zeros(255)), "qmap1"),
    (dict(qmap1=NAN_MAP), "qmap1: code[3] is nan; every entry must be finite"),
    (dict(qmap2=NAN_MAP), "qmap2: code[3] is nan; every entry must be finite"),
    (dict(absmax1=torch.zeros(1)), "absmax1"),
    (dict(absmax2=None), "adam needs qmap2 and absmax2"),
    (dict(absmax2=torch.zeros(2, dtype=torch.float16)), "absmax2 must be float32"),
]


@pytest.mark.parametrize("over, message", BAD8)
@pytest.mark.parametrize("fn", [ops.optimizer_update_8bit_blockwise, ref.optimizer_update_8bit_blockwise],
                         ids=["op", "reference"])
def test_bad_8bit_arguments_are_clear_errors_that_change_nothing(fn, over, message):
    a = args8(**over)
    before = {k: v.clone() for k, v in a.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(RuntimeError, match=re.escape(message)):
        fn(**a)
    for k, v in before.items():
        assert torch.equal(a[k], v, ) or (torch.isnan(v).any() and torch.equal(a[k].nan_to_num(), v.nan_to_num())), k


def test_meta_tensors_are_checked():
    a = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in args32().items()}
    ops.optimizer_update_32bit(**a)
    a["state1"] = torch.zeros(5, device="meta")
    with pytest.raises(RuntimeError, match="state1 must hold 300 values, got 5"):
        ops.optimizer_update_32bit(**a)
