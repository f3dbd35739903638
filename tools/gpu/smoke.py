"""Smoke test of every CUDA op family against the CPU's scalar path (tools/gpu/check.sh, stage 3): the first thing to
learn on a GPU is whether each kernel runs and gives the CPU's bits. One line per case, PASS or FAIL with the largest
difference; the device is synchronized after each case, so an asynchronous fault names its case. A sticky CUDA error
(an illegal address: the context is lost, and every later call would fail too) stops the run at once, exit 2.
Exit 1 when a case failed, 0 when all passed.

  python3 tools/gpu/smoke.py [--dry] [-k SUBSTRING]

Without a GPU it prints why and exits 0; --dry runs the same cases with the CPU at its best instruction set in the
device's place (checks the script itself, and the vectorized CPU kernels against the scalar ones).

Bit-exact, as the kernels promise: 8-bit and 4-bit quantize (codes and absmax) and dequantize, for float32, float16
and bfloat16 at blocksizes 64, 256 and 4096, odd lengths, special values, misaligned views (storage offsets) of
inputs and outputs, an unsorted codebook with ties; the int8 ops; the optimizer updates; gemv_4bit on integer
values, where any summation order is exact. Within float32 summation error: gemv_4bit on NF4 data (against a
float64 product), Linear4bit forward and backward (against the same module on the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback

import torch

# Errors after which the CUDA context is unusable: nothing later can run.
STICKY = ("illegal memory access", "unspecified launch failure", "misaligned address", "illegal instruction",
          "device-side assert", "uncorrectable ECC", "an illegal", "launch timed out", "hardware stack error")


class Sticky(Exception):
    pass


class Smoke:
    def __init__(self, device: str, ref_isa: str, only: str | None):
        self.device = device
        self.ref_isa = ref_isa
        self.only = only
        self.failed = 0
        self.passed = 0

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def ref(self):
        """The CPU reference: the scalar instruction set (bnb.config's cpu.isa cap), whatever this CPU has."""
        import bnb
        return bnb.config.override(cpu__isa=self.ref_isa)

    def case(self, name: str, fn) -> None:
        if self.only and self.only not in name:
            return
        t0 = time.perf_counter()
        try:
            diff = fn()
            self.sync()
            self.passed += 1
            print(f"PASS {name}: max diff {diff:g} ({(time.perf_counter() - t0) * 1e3:.0f} ms)", flush=True)
        except AssertionError as e:
            self.failed += 1
            print(f"FAIL {name}: {e}", flush=True)
        except Exception as e:  # noqa: BLE001  (one case's error must not hide the others)
            text = f"{type(e).__name__}: {e}"
            self.failed += 1
            print(f"FAIL {name}: {text.splitlines()[0] if text else type(e).__name__}", flush=True)
            traceback.print_exc(limit=3, file=sys.stdout)
            if any(s in text for s in STICKY):
                raise Sticky(f"{name}: {text.splitlines()[0]}") from e


# ---------------------------------------------------------------------------------------------------- comparisons

def same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> float:
    """0.0 when got and want have the same dtype, shape and bits (NaN equal to NaN, payloads aside); else an
    AssertionError naming how many elements differ and the first."""
    got, want = got.cpu(), want.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
    g, w = got, want
    if g.is_floating_point():
        nan = g.isnan() & w.isnan()
        g, w = torch.where(nan, 0, g), torch.where(nan, 0, w)
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
        g, w = g.view(ints), w.view(ints)
    bad = (g != w).nonzero()
    if bad.numel():
        i = tuple(bad[0].tolist())
        diff = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()
        raise AssertionError(f"{what}: {bad.shape[0]} of {want.numel()} elements differ (max diff {diff:g}), "
                             f"first at {list(i)}: got {got[i].item()!r}, want {want[i].item()!r}")
    return 0.0


def close(got: torch.Tensor, want: torch.Tensor, what: str, rtol: float) -> float:
    """Max |got - want|, which must be within rtol of want's largest magnitude (a summation-order bound)."""
    got, want = got.cpu().double(), want.cpu().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert bool(got.isfinite().all()), f"{what}: {int((~got.isfinite()).sum())} non-finite values"
    diff = (got - want).abs().max().item() if got.numel() else 0.0
    scale = want.abs().max().item() if want.numel() else 0.0
    assert diff <= rtol * scale, f"{what}: max diff {diff:g} above {rtol:g} x {scale:g}"
    return diff


def sample(n: int, dtype: torch.dtype, seed: int, specials: bool = True) -> torch.Tensor:
    """Normal values over several magnitudes; with specials a zero block, NaN, +-inf and subnormals."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 10.0 ** torch.randint(-3, 4, (n,), generator=g)
    if specials and n > 5000:
        x[4096:4160] = 0
        x[300], x[4500], x[4501] = float("nan"), float("inf"), float("-inf")
        x[5000] = 2.0 ** -140
    return x.to(dtype)


def offset_view(t: torch.Tensor, device: str, offset: int = 1) -> torch.Tensor:
    """t on `device`, as a view starting `offset` elements into a larger buffer: a misaligned data pointer."""
    buf = torch.empty(t.numel() + offset, dtype=t.dtype, device=device)
    view = buf[offset:].view(t.shape)
    view.copy_(t)
    return view


DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BLOCKSIZES = (64, 256, 4096)


# ------------------------------------------------------------------------------------------------------- families

def blockwise8(s: Smoke) -> None:
    import bnb
    ops = torch.ops.bnb
    dev = s.device
    dynamic = bnb.functional.create_dynamic_map()

    def roundtrip(dtype, bs, n, code, misaligned):
        x = sample(n, dtype, seed=bs + n)
        with s.ref():
            q_want, am_want = ops.quantize_blockwise(x, code, bs)
            out_want = ops.dequantize_blockwise(q_want, am_want, code, bs, dtype)
        xd = offset_view(x, dev) if misaligned else x.to(dev)
        cd = code.to(dev)
        if misaligned:  # outputs off alignment too: the into / out= forms
            q = offset_view(torch.zeros(n, dtype=torch.uint8), dev)
            am = offset_view(torch.zeros(am_want.numel()), dev)
            ops.quantize_blockwise_into(xd, cd, bs, q, am)
            out = offset_view(torch.zeros(n, dtype=dtype), dev)
            ops.dequantize_blockwise.out(offset_view(q_want, dev), offset_view(am_want, dev), cd, bs, dtype, out=out)
        else:
            q, am = ops.quantize_blockwise(xd, cd, bs)
            out = ops.dequantize_blockwise(q_want.to(dev), am_want.to(dev), cd, bs, dtype)
        s.sync()
        return max(same_bits(q, q_want, "codes"), same_bits(am, am_want, "absmax"),
                   same_bits(out, out_want, "dequantized"))

    for dtype in DTYPES:
        for bs in BLOCKSIZES:
            s.case(f"blockwise8 {str(dtype)[6:]} bs{bs} n=1000003",
                   lambda dtype=dtype, bs=bs: roundtrip(dtype, bs, 1_000_003, dynamic, False))
        s.case(f"blockwise8 {str(dtype)[6:]} bs256 n=20011 misaligned views",
               lambda dtype=dtype: roundtrip(dtype, 256, 20011, dynamic, True))
    unsorted = dynamic[torch.randperm(256, generator=torch.Generator().manual_seed(7))]
    unsorted[3] = unsorted[200]
    s.case("blockwise8 bfloat16 bs4096 unsorted codebook with ties",
           lambda: roundtrip(torch.bfloat16, 4096, 70001, unsorted, False))

    def nonfinite():
        # The CPU rejects a codebook with NaN; CUDA does not check (that would sync): NaN absmax, same codes twice.
        code = dynamic.clone()
        code[100] = float("nan")
        x = sample(50_000, torch.float32, seed=3, specials=False).to(dev)
        results = [ops.quantize_blockwise(x, code.to(dev), 256) for _ in range(2)]
        s.sync()
        assert bool(results[0][1].isnan().all()), "absmax not all NaN with a NaN in the codebook"
        return same_bits(results[1][0], results[0][0].cpu(), "codes of two identical calls")
    if dev == "cuda":
        s.case("blockwise8 codebook with NaN: absmax NaN, deterministic codes", nonfinite)


def blockwise4(s: Smoke) -> None:
    ops = torch.ops.bnb
    dev = s.device

    def roundtrip(dtype, bs, quant, n, misaligned):
        x = sample(n, dtype, seed=bs + n + 1)
        with s.ref():
            p_want, am_want = ops.quantize_4bit(x, bs, quant, torch.uint8)
            out_want = ops.dequantize_4bit(p_want, am_want, bs, quant, [n], dtype)
        if misaligned:  # into misaligned views (quantize_4bit_into), as F.quantize_4bit(out=, absmax=) writes
            p, am = offset_view(torch.zeros_like(p_want), dev), offset_view(torch.zeros_like(am_want), dev)
            ops.quantize_4bit_into(offset_view(x, dev), bs, quant, p, am)
            out = offset_view(torch.zeros(n, dtype=dtype), dev)
            ops.dequantize_4bit.out(offset_view(p_want, dev), offset_view(am_want, dev), bs, quant, [n], dtype,
                                    out=out)
        else:
            p, am = ops.quantize_4bit(x.to(dev), bs, quant, torch.uint8)
            out = ops.dequantize_4bit(p_want.to(dev), am_want.to(dev), bs, quant, [n], dtype)
        s.sync()
        return max(same_bits(p, p_want, "packed"), same_bits(am, am_want, "absmax"),
                   same_bits(out, out_want, "dequantized"))

    for dtype in DTYPES:
        for bs in BLOCKSIZES:
            s.case(f"blockwise4 nf4 {str(dtype)[6:]} bs{bs} n=1000003",
                   lambda dtype=dtype, bs=bs: roundtrip(dtype, bs, "nf4", 1_000_003, False))
        s.case(f"blockwise4 nf4 {str(dtype)[6:]} bs64 n=20011 misaligned views",
               lambda dtype=dtype: roundtrip(dtype, 64, "nf4", 20011, True))
    s.case("blockwise4 fp4 bfloat16 bs64 n=100003", lambda: roundtrip(torch.bfloat16, 64, "fp4", 100_003, False))


def gemv4(s: Smoke) -> None:
    from bnb import functional as F
    ops = torch.ops.bnb
    dev = s.device

    def integer_case(dtype, n, k, bs, b_offset):
        """Integer codes, absmax and inputs: every product and partial sum is exact, so any order gives the CPU's
        bits."""
        g = torch.Generator().manual_seed(n + k)
        packed = torch.randint(0, 256, ((n * k + 1) // 2, 1), generator=g, dtype=torch.uint8)
        absmax = torch.randint(1, 4, (-(-n * k // bs),), generator=g).float()
        code = torch.arange(16).float() - 8
        a = (torch.randint(-4, 5, (1, k), generator=g)).to(dtype)
        with s.ref():
            want = ops.gemv_4bit(a, packed, [n, k], absmax, code, bs)
        B = offset_view(packed, dev, b_offset) if b_offset else packed.to(dev)
        got = ops.gemv_4bit(a.to(dev), B, [n, k], absmax.to(dev), code.to(dev), bs)
        s.sync()
        return same_bits(got, want, "gemv")

    def nf4_case(dtype, n, k):
        g = torch.Generator().manual_seed(n * 3 + k)
        W = (torch.randn(n, k, generator=g) * 0.02).to(dtype)
        with s.ref():
            Wq, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4")
        a = torch.randn(1, k, generator=g).to(dtype)
        Wd = F.dequantize_4bit(Wq, state).double()
        want = a.double() @ Wd.t()
        got = ops.gemv_4bit(a.to(dev), Wq.to(dev), [n, k], state.absmax.to(dev), state.code.to(dev), 64)
        s.sync()
        # Relative to the largest output: a bf16/fp16 rounding of the output, or float32 sums over K = 8192 in any
        # order; a wrong weight or row is off by O(1).
        return close(got, want, "gemv vs float64", 1e-2 if dtype != torch.float32 else 1e-4)

    # K above the shared-memory tile of A (8192 floats, 16384 halves), odd K and N * K (the element path), a B
    # view off its 16-byte alignment (the element path again), a large row.
    shapes = [(37, 16416, 64, 0), (300, 8192, 64, 0), (5, 33, 32, 0), (4, 4103, 4096, 0), (9, 4096, 64, 1)]
    for dtype in DTYPES:
        for n, k, bs, off in shapes:
            what = "element path" if k % 32 or off else ("K above a tile" if k > 8192 else "vector path")
            s.case(f"gemv4 {str(dtype)[6:]} integer {n}x{k} bs{bs}{' B offset 1' if off else ''} ({what})",
                   lambda dtype=dtype, n=n, k=k, bs=bs, off=off: integer_case(dtype, n, k, bs, off))
        s.case(f"gemv4 {str(dtype)[6:]} nf4 1024x8192 vs float64", lambda dtype=dtype: nf4_case(dtype, 1024, 8192))


def linear4bit(s: Smoke) -> None:
    import bnb
    dev = s.device

    def case(rows, nested):
        torch.manual_seed(0)
        dense = torch.nn.Linear(4096, 1024).to(torch.bfloat16)
        layers = []
        for target in ("cpu", dev):
            layer = bnb.nn.Linear4bit(4096, 1024, quant_type="nf4", compute_dtype=torch.bfloat16,
                                      compress_statistics=nested)
            layer.load_state_dict(dense.state_dict())
            if target == "cpu":
                with s.ref():
                    layer = layer.to("cpu")  # quantizes on the CPU
            else:
                layer = layer.cuda() if dev == "cuda" else layer.to(dev)  # quantizes on the device
            layers.append(layer)
        want_l, got_l = layers
        diff = same_bits(got_l.weight.data, want_l.weight.data, "packed weight")
        gs, ws = got_l.weight.quant_state, want_l.weight.quant_state
        if not nested:  # nested: absmax - mean(absmax) is quantized, and the two means may differ in the last bit
            diff = max(diff, same_bits(gs.absmax, ws.absmax, "absmax"))
        x = torch.randn(rows, 4096).to(torch.bfloat16)
        xs = [x.clone().requires_grad_(True), x.to(dev).requires_grad_(True)]
        with s.ref():
            y_want = want_l(xs[0])
            y_want.float().square().sum().backward()
        y = got_l(xs[1])
        y.float().square().sum().backward()
        s.sync()
        diff = max(diff, close(y, y_want, "forward", 2e-2))
        return max(diff, close(xs[1].grad, xs[0].grad, "input gradient", 2e-2))

    s.case("Linear4bit nf4 bf16 4096->1024 .cuda(): weight bits, forward, backward; 1 row",
           lambda: case(1, False))
    s.case("Linear4bit nf4 bf16 4096->1024 .cuda(), nested absmax: packed bits, forward, backward; 8 rows",
           lambda: case(8, True))


def int8(s: Smoke) -> None:
    ops = torch.ops.bnb
    dev = s.device

    def quant(dtype, threshold):
        g = torch.Generator().manual_seed(1)
        A = (torch.randn(64, 1000, generator=g) * 3).to(dtype)
        A[3, 500] = float("nan")
        A[2] = 0
        with s.ref():
            want = [ops.int8_vectorwise_quant(A, threshold), ops.int8_double_quant(A, threshold)]
        got = [ops.int8_vectorwise_quant(A.to(dev), threshold), ops.int8_double_quant(A.to(dev), threshold)]
        codes, stats = want[0][0], want[0][1]
        with s.ref():
            deq_want = ops.int8_vectorwise_dequant(codes, stats)
        deq = ops.int8_vectorwise_dequant(codes.to(dev), stats.to(dev))
        s.sync()
        d = same_bits(deq, deq_want, "vectorwise_dequant")
        for gs, ws, op in zip(got, want, ("vectorwise_quant", "double_quant")):
            for i, (gt, wt) in enumerate(zip(gs, ws)):
                assert (gt is None) == (wt is None), f"{op} output {i}: None on one side only"
                if wt is not None:
                    d = max(d, same_bits(gt, wt, f"{op} output {i}"))
        return d

    def product(dtype, rows=40):
        g = torch.Generator().manual_seed(2)
        A = torch.randint(-127, 128, (rows, 4096), generator=g, dtype=torch.int8)
        B = torch.randint(-127, 128, (72, 4096), generator=g, dtype=torch.int8)
        rs, cs = torch.rand(rows, generator=g) * 5, torch.rand(72, generator=g) * 5
        bias = torch.randn(72, generator=g).to(dtype)
        with s.ref():
            C = ops.int8_linear_matmul(A, B)
            want = [C, ops.int8_mm_dequant(C, rs, cs, dtype, bias), ops.int8_scaled_mm(A, B, rs, cs, bias, dtype)]
        d_ = [t.to(dev) for t in (A, B, C, rs, cs, bias)]
        got = [ops.int8_linear_matmul(d_[0], d_[1]), ops.int8_mm_dequant(d_[2], d_[3], d_[4], dtype, d_[5]),
               ops.int8_scaled_mm(d_[0], d_[1], d_[3], d_[4], d_[5], dtype)]
        s.sync()
        return max(same_bits(gt, wt, w) for gt, wt, w in zip(got, want, ("matmul", "mm_dequant", "scaled_mm")))

    def mixed(dtype, shape=(3, 6, 128)):
        g = torch.Generator().manual_seed(3)
        A = (torch.randn(*shape, generator=g) * 3).to(dtype)
        W = (torch.randn(96, 128, generator=g) * 3).to(dtype)
        bias = torch.randn(96, generator=g).to(dtype)
        with s.ref():
            CA, SCA, cols = ops.int8_vectorwise_quant(A, 6.0)
            CB, SCB, _ = ops.int8_vectorwise_quant(W, 0.0)
            want = ops.int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, cols, bias)
            scaled = ops.int8_scaled_mm(CA, CB, SCA, SCB, bias, dtype)
            subB = ops.int8_vectorwise_dequant(CB[:, cols], SCB).to(dtype)
        on = [t.to(dev) if t is not None else None for t in (A, CA, CB, SCA, SCB, cols, bias)]
        got = ops.int8_mixed_scaled_mm(*on)
        # The outlier columns' addmm is torch's, whose float16 rounding differs by device (the H100's differed from
        # the CPU's in the last bit of 2 of 1728 values): the CPU's int8 part and weight columns, added on the device.
        want = (scaled.to(dev).view(-1, 96).addmm(want[1].to(dev), subB.to(dev).t()).view(got[0].shape), want[1])
        s.sync()
        d = same_bits(got[0], want[0], "mixed product")
        if want[1] is not None:
            d = max(d, same_bits(got[1], want[1], "outlier block"))
        return d

    for dtype in DTYPES:
        s.case(f"int8 quantize/dequantize {str(dtype)[6:]} threshold 0 and 6",
               lambda dtype=dtype: max(quant(dtype, 0.0), quant(dtype, 6.0)))
    s.case("int8 matmul, mm_dequant, scaled_mm (bf16, bias)", lambda: product(torch.bfloat16))
    # Up to 16 rows: scaled_mm's one pass (int8_scaled_gemv), the outlier columns by int8_dequantize_columns.
    s.case("int8 matmul, mm_dequant, scaled_mm, 1 and 16 rows (fp16, bias)",
           lambda: max(product(torch.float16, 1), product(torch.float16, 16)))
    s.case("int8 mixed_scaled_mm (fp16, outliers)", lambda: mixed(torch.float16))
    s.case("int8 mixed_scaled_mm, one token (bf16, outliers)", lambda: mixed(torch.bfloat16, (1, 128)))


def optim(s: Smoke) -> None:
    ops = torch.ops.bnb
    dev = s.device
    signed, unsigned = torch.linspace(-1, 1, 256), torch.linspace(0, 1, 256)

    def states(name, n, g):
        s1 = torch.randn(n, generator=g) * 0.1
        s2 = torch.rand(n, generator=g) * 0.01 if name == "adam" else None  # adam has two states, momentum one
        return s1, s2

    def update32(name, dtype, n):
        g = torch.Generator().manual_seed(n)
        p, grad = torch.randn(n, generator=g).to(dtype), (torch.randn(n, generator=g) * 0.5).to(dtype)
        s1, s2 = states(name, n, g)
        args = [grad, p, s1, s2]
        want = [t.clone() if t is not None else None for t in args]
        got = [t.to(dev) if t is not None else None for t in args]
        for step in (1, 2):
            with s.ref():
                ops.optimizer_update_32bit(name, *want, None, 0.0, 1.0, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, step,
                                           1e-3, 1.0)
            ops.optimizer_update_32bit(name, *got, None, 0.0, 1.0, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, step, 1e-3, 1.0)
        s.sync()
        return max(same_bits(gt, wt, w) for gt, wt, w in zip(got[1:], want[1:], ("p", "state1", "state2"))
                   if wt is not None)

    def update8(name, dtype, n, offset=0):
        # offset: p and g start that many elements into their storage (misaligned: the general kernel alone).
        g = torch.Generator().manual_seed(n + 1)
        p = torch.randn(n + offset, generator=g).to(dtype)[offset:]
        grad = (torch.randn(n + offset, generator=g) * 0.5).to(dtype)[offset:]
        s1, s2 = states(name, n, g)
        with s.ref():
            q1, a1 = ops.quantize_blockwise(s1, signed, 256)
            q2, a2 = ops.quantize_blockwise(s2, unsigned, 256) if s2 is not None else (None, None)
        qmap2 = unsigned if s2 is not None else None
        args = [grad, p, q1, q2, signed, qmap2, a1, a2]
        want = [t.clone() if t is not None else None for t in args]
        got = [t.to(dev) if t is not None else None for t in args]
        for i in (0, 1):  # g and p on the device at the same offset into a storage
            got[i] = torch.cat([torch.zeros(offset, dtype=dtype), args[i]]).to(dev)[offset:]

        def run(fn, t, step):
            fn(name, t[0], t[1], t[2], t[3], 0.9, 0.999, 0.0, 0.0, 1e-8, step, 1e-3, t[4], t[5], t[6], t[7], 0.01,
               1.0)
        for step in (1, 2):
            with s.ref():
                run(ops.optimizer_update_8bit_blockwise, want, step)
            run(ops.optimizer_update_8bit_blockwise, got, step)
        s.sync()
        names = ("grad", "p", "q1", "q2", "qmap1", "qmap2", "absmax1", "absmax2")
        return max(same_bits(gt, wt, w) for gt, wt, w in zip(got[1:], want[1:], names[1:]) if wt is not None)

    for name in ("adam", "momentum"):
        for dtype in (torch.float32, torch.bfloat16):
            s.case(f"optim 32-bit {name} {str(dtype)[6:]} n=4099",
                   lambda name=name, dtype=dtype: update32(name, dtype, 4099))
            s.case(f"optim 8-bit blockwise {name} {str(dtype)[6:]} n=5000",
                   lambda name=name, dtype=dtype: update8(name, dtype, 5000))

    def per_thread(per, fn):
        import bnb
        with bnb.config.override(cuda__optim8_per_thread=per):
            return fn()

    def paged_adamw8bit():
        """PagedAdamW8bit's state in managed memory (bnb.optim.paged), prefetched each step, against AdamW8bit on
        the CPU."""
        import bnb
        from bnb.optim import paged
        g = torch.Generator().manual_seed(7)
        w = torch.randn(400, 260, generator=g) * 0.1  # above the size that is paged
        grads = [torch.randn(400, 260, generator=g) * 0.1 for _ in range(3)]
        p_cpu, p_dev = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.to(dev))
        with s.ref():
            ref_opt = bnb.optim.AdamW8bit([p_cpu])
            for grad in grads:
                p_cpu.grad = grad
                ref_opt.step()
        opt = bnb.optim.PagedAdamW8bit([p_dev])
        for grad in grads:
            p_dev.grad = grad.to(dev)
            opt.step()
        s.sync()
        state = opt.state[p_dev]
        if torch.device(dev).type == "cuda":  # (a dry run's CPU state is ordinary memory)
            assert state["state1"].data_ptr() in paged._live and state["state2"].data_ptr() in paged._live, \
                "paged state is not in managed memory"
        return max(same_bits(p_dev, p_cpu, "p"), same_bits(state["state1"], ref_opt.state[p_cpu]["state1"], "state1"))

    s.case("optim PagedAdamW8bit: managed state, prefetched, 3 steps", paged_adamw8bit)

    def paged_tensors():
        """bnb.functional's paged tensors (bnb.paged_memory): managed memory on the GPU, filled there, moved to host
        memory and back by prefetches, and read on the host after each; GlobalPageManager.prefetch_all with them."""
        import bnb.functional as F
        from bnb import paged_memory
        a = F.get_paged(1000, 257, device=dev)
        if torch.device(dev).type == "cuda":  # (a dry run's paged tensor is ordinary memory)
            assert a.device.type == "cuda" and paged_memory.allocation_of(a) is not None, \
                "get_paged's tensor is not in managed memory"
            assert paged_memory.allocation_of(a[1:, 3:])[2] == (999 * 257 - 3) * 4, "a view's managed span"
        F.fill(a, 3.0)
        F.prefetch_tensor(a, to_cpu=True)
        s.sync()
        filled = a.to("cpu", copy=True)
        F.prefetch_tensor(a)
        F.elementwise_func("arange", a, None, 0)
        F.GlobalPageManager.get_instance().prefetch_all(to_cpu=True)
        s.sync()
        want = torch.arange(a.numel(), dtype=torch.float32).view(a.shape)
        return max(same_bits(filled, torch.full_like(filled, 3.0), "fill"), same_bits(a, want, "arange"))

    s.case("paged tensors: get_paged, fill, prefetch to host and back, prefetch_all", paged_tensors)

    # The kernel's other shapes (cuda.optim8_per_thread): a warp a block by 16-byte vectors, and 4 elements a thread;
    # n = 5000 runs 19 whole blocks by the WHOLE variant and the last 136 elements by the general one, and a
    # misaligned p and g run all by the general one.
    for per in (4, 8):
        for dtype in (torch.float32, torch.bfloat16):
            s.case(f"optim 8-bit blockwise adam {str(dtype)[6:]} n=5000, cuda.optim8_per_thread {per}",
                   lambda dtype=dtype, per=per: per_thread(per, lambda: update8("adam", dtype, 5000)))
    s.case("optim 8-bit blockwise adam float32 n=5000, p and g one element off 16 bytes",
           lambda: update8("adam", torch.float32, 5000, offset=1))


FAMILIES = (blockwise8, blockwise4, gemv4, linear4bit, int8, optim)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry", action="store_true", help="no GPU: the CPU's best instruction set stands in for CUDA")
    ap.add_argument("-k", dest="only", help="run only the cases whose name holds this substring")
    a = ap.parse_args()
    if not a.dry and not torch.cuda.is_available():
        print("smoke: no CUDA device here; skipped (--dry runs the cases on the CPU)")
        return 0
    import bnb
    compiled = bnb._C.cpu_isas_compiled()
    ref_isa = "scalar" if "scalar" in compiled else compiled[-1]
    device = "cpu" if a.dry else "cuda"
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU at {bnb._C.cpu_isa()} (dry run)"
    print(f"smoke: bnb {bnb.__version__}, torch {torch.__version__}, {where}; reference: CPU at cpu.isa={ref_isa}",
          flush=True)
    s = Smoke(device, ref_isa, a.only)
    t0 = time.perf_counter()
    try:
        for family in FAMILIES:
            family(s)
    except Sticky as e:
        print(f"smoke: STOPPED at a sticky CUDA error ({e}); {s.passed} passed, {s.failed} failed before it")
        return 2
    stats = bnb.jit.stats() if device == "cuda" else {}
    print(f"smoke: {s.passed} passed, {s.failed} failed in {time.perf_counter() - t0:.1f} s"
          + (f"; {stats['compiles']} kernels compiled in {stats['compile_ms']:.0f} ms, {stats['disk_hits']} loaded"
             f" from disk" if stats else ""))
    return 1 if s.failed else 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
