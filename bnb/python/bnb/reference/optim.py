"""Optimizer updates in plain torch: the definition the C++ kernels (bnb/ops/optim, bnb/core/optim.h) match bit for
bit (update-norm clipping aside: its sum over all elements is taken in float64 in any order).

Per element, in float32, every operation rounded on its own (no fused multiply-add; sqrt correctly rounded):
g = g * gnorm_scale, then the optimizer's update of the state(s) and of p, p written back in its dtype (rounded to
nearest even). The scalars are Python floats rounded once to float32 (f32 below); bias corrections are computed in
float64 first (c1 = 1 - beta1^step, c2 = sqrt(1 - beta2^step)). Weight decay is decoupled (p * f32(1 - lr * wd))
for adam, lamb, ademamix and lion, and added to the gradient (g + p * f32(wd)) for momentum, lars, rmsprop and adagrad.
  adam, lamb   m = m * b1 + g * (1 - b1); v = v * b2 + (g * g) * (1 - b2)
               32-bit: p = p + (f32(-lr * c2 / c1) * clip) * (m / (sqrt(v) + f32(eps * c2)))
               8-bit:  p = p + f32(-lr / c1) * (m / (sqrt(v) / f32(c2) + eps))      (bitsandbytes' two forms)
  ademamix     m1 = m1 * b1 + g * (1 - b1); m2 = m2 * b3 + g * (1 - b3); v = v * b2 + (g * g) * (1 - b2)
               p = p - lr * ((m1 / f32(c1) + alpha * m2) / (sqrt(v) / f32(c2) + eps))   (state1 holds [m1, m2])
  momentum, lars   m = g at step 1, else m * b1 + g;  p = p + (f32(-lr) * m) * clip
  lion         p = p - (lr * clip) * sign(m * b1 + g * (1 - b1)); then m = m * b2 + g * (1 - b2)
  rmsprop      v = v * b1 + (g * g) * (1 - b1); p = p - (lr * clip) * (g / (sqrt(v) + eps))
  adagrad      v = v + g * g;                   p = p - lr * (g / (sqrt(v) + eps))
`clip` (32-bit, max_unorm > 0; the lamb / lars trust ratio): with u the update above before lr (adam: m / (sqrt(v) +
eps) of the bias-corrected m and v, momentum: the new m, rmsprop / adagrad: g / (sqrt(v) + eps), lion: the new m),
unorm = sum(u * u) (float64, stored in unorm_vec as float32) and clip = limit / sqrt(unorm) where sqrt(unorm) exceeds
limit = f32(max_unorm * param_norm (+ eps for the one-state optimizers)), else 1. Lion updates with the previous
unorm and then stores the new state's (as bitsandbytes).
skip_zeros: elements whose gradient is 0 keep p and their state as they were.
8-bit blockwise: each state is dequantized from its codes (qmap[code] * absmax of its block of 256), updated as above,
then quantized again by the blockwise 8-bit rule (bnb/core/blockwise8.h) into the same codes and absmax.
"""

import math
import struct

import torch

from . import blockwise8, checks
from .registry import kernel

BLOCKSIZE = 256  # the 8-bit states' blocks, as bitsandbytes' (no argument of the op)
TWO_STATE = ("adam", "lamb", "ademamix")
ONE_STATE = ("momentum", "lars", "rmsprop", "adagrad", "lion")
DECOUPLED = ("adam", "lamb", "ademamix", "lion")
_F32 = torch.float32


def f32(x: float) -> float:
    """x rounded to float32."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _t(x: float) -> torch.Tensor:
    return torch.tensor(f32(x), dtype=_F32)


def _check(op, name, g, p, state1, state2, eight_bit: bool) -> None:
    checks.check(name in TWO_STATE + ONE_STATE,
                 f"bnb::{op}: unknown optimizer '{name}'; expected one of: {', '.join(TWO_STATE + ONE_STATE)}")
    checks.float_dtype(op, "p", p.dtype)
    checks.check(g.dtype == p.dtype, f"bnb::{op}: g must have p's dtype {checks.dtype_name(p.dtype)}, got "
                                     f"{checks.dtype_name(g.dtype)}")
    checks.check(g.numel() == p.numel(), f"bnb::{op}: g must have p's {p.numel()} elements, got {g.numel()}")
    checks.same_device(op, "g", g, p, "p")
    n = p.numel()
    want = 2 * n if name == "ademamix" else n
    state_dtype = torch.uint8 if eight_bit else _F32
    checks.dtype_is(op, "state1", state1, state_dtype)
    checks.check(state1.numel() == want, f"bnb::{op}: state1 must hold {want} values"
                                         f"{' (two per parameter: ademamix)' if name == 'ademamix' else ''}, got "
                                         f"{state1.numel()}")
    checks.same_device(op, "state1", state1, p, "p")
    if name in TWO_STATE:
        checks.check(state2 is not None, f"bnb::{op}: {name} needs state2")
        checks.dtype_is(op, "state2", state2, state_dtype)
        checks.check(state2.numel() == n, f"bnb::{op}: state2 must hold {n} values, got {state2.numel()}")
        checks.same_device(op, "state2", state2, p, "p")
    else:
        checks.check(state2 is None, f"bnb::{op}: {name} keeps one state; state2 must be None")


def _finish(p, p_new, g, skip_zeros):
    """p_new written into p (its dtype), but where skip_zeros and g == 0."""
    if skip_zeros:
        p_new = torch.where(g == 0, p.float(), p_new)
    p.copy_(p_new.to(p.dtype))


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded float32 square root (torch.sqrt on CPU is not: it misrounds about one value in five on
    AVX-512 builds). Through float64 it is exact: a float64 root rounds to the float32 root with no double-rounding
    error (53 >= 2 * 24 + 2 bits)."""
    return torch.sqrt(x.double()).to(_F32)


def _keep(old, new, g, skip_zeros):
    return torch.where(g == 0, old, new) if skip_zeros else new


def _update(name, g_in, p_in, s1, s2, beta1, beta2, beta3, alpha, eps, weight_decay, step, lr, gnorm_scale, clip,
            eight_bit):
    """(new p in float32, new state1, new state2) for float32 states s1 (ademamix: [2, n]) and s2."""
    g = g_in.reshape(-1).to(_F32) * _t(gnorm_scale)
    p = p_in.reshape(-1).to(_F32)
    if weight_decay > 0.0:
        if name in DECOUPLED:
            p = p * _t(1.0 - lr * weight_decay)
        else:
            g = g + p * _t(weight_decay)
    c1 = 1.0 - beta1 ** step
    c2 = math.sqrt(1.0 - beta2 ** step)
    b1, b2, b3 = _t(beta1), _t(beta2), _t(beta3)
    if name in ("adam", "lamb"):
        m = s1 * b1 + g * _t(1.0 - beta1)
        v = s2 * b2 + (g * g) * _t(1.0 - beta2)
        if eight_bit:
            p = p + _t(-lr / c1) * (m / (_sqrt(v) / _t(c2) + _t(eps)))
        else:
            p = p + (_t(-lr * c2 / c1) * clip) * (m / (_sqrt(v) + _t(eps * c2)))
        return p, m, v
    if name == "ademamix":
        m1 = s1[0] * b1 + g * _t(1.0 - beta1)
        m2 = s1[1] * b3 + g * _t(1.0 - beta3)
        v = s2 * b2 + (g * g) * _t(1.0 - beta2)
        mixed = m1 / _t(c1) + _t(alpha) * m2
        p = p - _t(lr) * (mixed / (_sqrt(v) / _t(c2) + _t(eps)))
        return p, torch.stack([m1, m2]), v
    if name in ("momentum", "lars"):
        m = g if step == 1 else s1 * b1 + g
        return p + (_t(-lr) * m) * clip, m, None
    if name == "lion":
        direction = torch.sign(s1 * b1 + g * _t(1.0 - beta1))
        p = p - (_t(lr) * clip) * direction
        return p, s1 * b2 + g * _t(1.0 - beta2), None
    if name == "rmsprop":
        v = s1 * b1 + (g * g) * _t(1.0 - beta1)
        return p - (_t(lr) * clip) * (g / (_sqrt(v) + _t(eps))), v, None
    v = s1 + g * g  # adagrad
    return p - _t(lr) * (g / (_sqrt(v) + _t(eps))), v, None


def _unorm_sum(name, g_in, p_in, s1, s2, beta1, beta2, eps, weight_decay, step, gnorm_scale) -> float:
    """sum(u * u) of the update direction the trust ratio clips (module doc), in float64."""
    g = g_in.reshape(-1).to(_F32) * _t(gnorm_scale)
    p = p_in.reshape(-1).to(_F32)
    if weight_decay > 0.0 and name not in DECOUPLED:
        g = g + p * _t(weight_decay)
    b1, b2 = _t(beta1), _t(beta2)
    if name in ("adam", "lamb"):
        m = (s1 * b1 + g * _t(1.0 - beta1)) * _t(1.0 / (1.0 - beta1 ** step))
        v = (s2 * b2 + (g * g) * _t(1.0 - beta2)) * _t(1.0 / (1.0 - beta2 ** step))
        u = m / (_sqrt(v) + _t(eps))
    elif name in ("momentum", "lars"):
        u = g if step == 1 else s1 * b1 + g
    elif name == "lion":
        u = s1 * b2 + g * _t(1.0 - beta2)
    elif name == "rmsprop":
        u = g / (_sqrt(s1 * b1 + (g * g) * _t(1.0 - beta1)) + _t(eps))
    else:  # adagrad
        u = g / (_sqrt(s1 + g * g) + _t(eps))
    return (u * u).double().sum().item()


def _example(device, name, eight_bit, dtype=torch.bfloat16, n=1000):
    g = torch.Generator().manual_seed(0)
    p = torch.randn(n, generator=g).to(device, dtype)
    grad = torch.randn(n, generator=g).to(device, dtype)
    grad[::7] = 0  # for skip_zeros
    count = 2 * n if name == "ademamix" else n
    if not eight_bit:
        s1 = (torch.randn(count, generator=g) * 0.1).to(device)
        s2 = (torch.rand(n, generator=g) * 0.01).to(device) if name in TWO_STATE else None
        return (name, grad, p, s1, s2, None, 0.0, 0.0, 0.9, 0.999, 0.9999, 5.0, 1e-8, 0.01, 10, 1e-3, 1.0), {}
    signed = torch.linspace(-1, 1, 256)
    unsigned = torch.linspace(0, 1, 256)
    q1, a1 = blockwise8.quantize_blockwise((torch.randn(count, generator=g) * 0.1).view(-1), signed, BLOCKSIZE)
    if name == "ademamix":
        a1 = a1.view(2, -1)
    q2 = a2 = qmap2 = None
    if name in TWO_STATE:
        q2, a2 = blockwise8.quantize_blockwise(torch.rand(n, generator=g) * 0.01, unsigned, BLOCKSIZE)
        q2, a2, qmap2 = q2.to(device), a2.to(device), unsigned.to(device)
    return (name, grad, p, q1.to(device), q2, 0.9, 0.999, 0.9999, 5.0, 1e-8, 10, 1e-3, signed.to(device), qmap2,
            a1.to(device), a2, 0.01, 1.0), {}


@kernel("optimizer_update_32bit", differentiable=False, example=lambda d: _example(d, "adam", False))
def optimizer_update_32bit(optimizer_name: str, g: torch.Tensor, p: torch.Tensor, state1: torch.Tensor, state2,
                           unorm_vec, max_unorm: float, param_norm: float, beta1: float, beta2: float, beta3: float,
                           alpha: float, eps: float, weight_decay: float, step: int, lr: float, gnorm_scale: float,
                           skip_zeros: bool = False) -> None:
    op, name = "optimizer_update_32bit", optimizer_name
    _check(op, name, g, p, state1, state2, eight_bit=False)
    checks.check(step >= 1, f"bnb::{op}: step counts from 1, got {step}")
    if max_unorm > 0.0:
        checks.check(name != "ademamix", f"bnb::{op}: max_unorm (update-norm clipping) is not defined for ademamix")
        checks.check(unorm_vec is not None and unorm_vec.dtype == _F32 and unorm_vec.numel() == 1,
                     f"bnb::{op}: max_unorm > 0 needs unorm_vec, one float32 value")
        checks.same_device(op, "unorm_vec", unorm_vec, p, "p")
    s1 = state1.reshape(2, -1) if name == "ademamix" else state1.reshape(-1)
    s2 = state2.reshape(-1) if state2 is not None else None
    clip = torch.tensor(1.0, dtype=_F32)
    limit = f32(max_unorm * param_norm + (eps if name in ONE_STATE else 0.0))
    if max_unorm > 0.0 and name != "lion":
        unorm_vec.fill_(_unorm_sum(name, g, p, s1, s2, beta1, beta2, eps, weight_decay, step, gnorm_scale))
    if max_unorm > 0.0:
        current = _sqrt(unorm_vec.reshape(()).to(_F32))
        clip = torch.where(current > limit, torch.tensor(limit, dtype=_F32) / current, clip)
    p_new, m, v = _update(name, g, p, s1, s2, beta1, beta2, beta3, alpha, eps, weight_decay, step, lr, gnorm_scale,
                          clip, eight_bit=False)
    gz = g.reshape(-1)
    if max_unorm > 0.0 and name == "lion":  # the new state's norm, for the next step
        unorm_vec.fill_(_unorm_sum(name, g, p, s1, s2, beta1, beta2, eps, weight_decay, step, gnorm_scale))
    state1.copy_(_keep(s1, m, gz, skip_zeros).view(state1.shape))
    if state2 is not None:
        state2.copy_(_keep(s2, v, gz, skip_zeros).view(state2.shape))
    _finish(p, p_new.view(p.shape), g, skip_zeros)


def _check_8bit(op, name, p, state1, state2, qmap1, qmap2, absmax1, absmax2) -> None:
    blocks = checks.num_blocks(p.numel(), BLOCKSIZE)
    halves = 2 if name == "ademamix" else 1
    checks.float32_tensor(op, "qmap1", qmap1, p, 256, "one value per 8-bit code", "p")
    checks.float32_tensor(op, "absmax1", absmax1, p, halves * blocks, "one per block of 256 of each state", "p")
    if name in TWO_STATE:
        checks.check(qmap2 is not None and absmax2 is not None, f"bnb::{op}: {name} needs qmap2 and absmax2")
        checks.float32_tensor(op, "qmap2", qmap2, p, 256, "one value per 8-bit code", "p")
        checks.float32_tensor(op, "absmax2", absmax2, p, blocks, "one per block of 256", "p")
    for arg, q in (("qmap1", qmap1), ("qmap2", qmap2)):
        if q is not None:
            checks.finite_code(op, q, f"{arg}: ")


@kernel("optimizer_update_8bit_blockwise", differentiable=False, example=lambda d: _example(d, "adam", True))
def optimizer_update_8bit_blockwise(optimizer_name: str, g: torch.Tensor, p: torch.Tensor, state1: torch.Tensor,
                                    state2, beta1: float, beta2: float, beta3: float, alpha: float, eps: float,
                                    step: int, lr: float, qmap1: torch.Tensor, qmap2, absmax1: torch.Tensor, absmax2,
                                    weight_decay: float, gnorm_scale: float, skip_zeros: bool = False) -> None:
    op, name = "optimizer_update_8bit_blockwise", optimizer_name
    _check(op, name, g, p, state1, state2, eight_bit=True)
    checks.check(step >= 1, f"bnb::{op}: step counts from 1, got {step}")
    _check_8bit(op, name, p, state1, state2, qmap1, qmap2, absmax1, absmax2)
    n = p.numel()
    halves = 2 if name == "ademamix" else 1
    codes1 = state1.reshape(halves, n)
    am1 = absmax1.reshape(halves, -1)
    s1 = torch.stack([blockwise8.dequantize_codes(codes1[h], am1[h], qmap1, BLOCKSIZE, _F32) for h in range(halves)])
    s1 = s1 if halves == 2 else s1[0]
    s2 = blockwise8.dequantize_codes(state2.reshape(-1), absmax2, qmap2, BLOCKSIZE, _F32) if state2 is not None \
        else None
    one = torch.tensor(1.0, dtype=_F32)
    p_new, m, v = _update(name, g, p, s1, s2, beta1, beta2, beta3, alpha, eps, weight_decay, step, lr, gnorm_scale,
                          one, eight_bit=True)
    gz = g.reshape(-1)
    m = _keep(s1, m, gz, skip_zeros).reshape(halves, n)
    for h in range(halves):
        codes, absmax = blockwise8.quantize_blockwise(m[h], qmap1, BLOCKSIZE)
        codes1[h].copy_(codes)
        am1[h].copy_(absmax)
    if state2 is not None:
        codes, absmax = blockwise8.quantize_blockwise(_keep(s2, v, gz, skip_zeros), qmap2, BLOCKSIZE)
        state2.copy_(codes.view(state2.shape))
        absmax2.copy_(absmax.view(absmax2.shape))
    _finish(p, p_new.view(p.shape), g, skip_zeros)
