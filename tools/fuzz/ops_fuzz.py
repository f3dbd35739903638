"""Differential fuzzing of the ops through torch: random shapes, layouts (non-contiguous, offset views), dtypes,
blocksizes, codebooks, instruction sets and thread counts, each op's kernel on every device present (the CPU; CUDA
on a GPU machine) against the pure-torch reference kernel (bnb.reference) on the CPU, which it must equal bit for
bit (gemv_4bit, and the CPU's gemm_4bit and gemm_4bit_packed: within float32 summation error of a float64
product). Prints the first mismatch with the seed that replays it.

Run: .venv/bin/python tools/fuzz/ops_fuzz.py [--seconds S] [--cases N] [--seed K]
"""

import argparse
import math
import random
import sys
import time

import torch

import bnb  # noqa: F401  (registers the ops)
from bnb.reference import blockwise4 as ref4
from bnb.reference import blockwise8 as ref8

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def random_values(rng: random.Random, gen: torch.Generator, n: int) -> torch.Tensor:
    """float32 values as real and adversarial data come: normal at a random scale, log-uniform magnitudes, small
    integers (ties), and now and then NaN, infinities, subnormals and zero runs."""
    kind = rng.randrange(4)
    scale = 2.0 ** rng.randint(-60, 60)
    if kind == 0:
        v = torch.randn(n, generator=gen) * scale
    elif kind == 1:
        sign = torch.randint(0, 2, (n,), generator=gen) * 2 - 1
        v = sign * torch.exp2(torch.rand(n, generator=gen) * -40) * scale
    elif kind == 2:
        v = torch.randint(-8, 9, (n,), generator=gen).float() * scale / 8
    else:
        v = (torch.rand(n, generator=gen) * 2 - 1) * scale
    if rng.randrange(3) == 0:
        for _ in range(rng.randint(1, 5)):
            v[rng.randrange(n)] = rng.choice([float("nan"), float("inf"), float("-inf"), 2.0**-140, -(2.0**-149),
                                              3.0e38, 0.0])
    if n > 64 and rng.randrange(4) == 0:
        at = rng.randrange(n - 64)
        v[at:at + rng.randint(1, 64)] = 0
    return v


def random_tensor(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """A tensor of 1 to 3 dimensions, contiguous or a transposed, strided or offset view."""
    dims = [rng.randint(1, 300) for _ in range(rng.randint(1, 3))]
    if len(dims) == 3:
        dims[2] = rng.randint(1, 20)
    if rng.randrange(6) == 0:  # long rows: many blocks per thread
        dims[-1] = rng.randint(1, 40000)
    while math.prod(dims) > 2_000_000:
        dims[dims.index(max(dims))] //= 2
    layout = rng.randrange(4)
    if layout == 1 and len(dims) >= 2:  # transposed
        big = random_values(rng, gen, dims[0] * dims[1] * (dims[2] if len(dims) == 3 else 1)).to(dtype)
        return big.view(dims[1], dims[0], *dims[2:]).transpose(0, 1)
    if layout == 2:  # every other element along the last dimension
        full = dims[:-1] + [2 * dims[-1]]
        return random_values(rng, gen, math.prod(full)).to(dtype).view(full)[..., ::2]
    if layout == 3:  # a view that starts off the buffer's start
        n, off = math.prod(dims), rng.randint(1, 33)
        return random_values(rng, gen, n + off).to(dtype)[off:].view(dims)
    return random_values(rng, gen, math.prod(dims)).to(dtype).view(dims)


def random_code(rng: random.Random, gen: torch.Generator) -> tuple[str, torch.Tensor]:
    kind = rng.randrange(3)
    if kind == 0:
        return "dynamic", bnb.functional.create_dynamic_map()
    code = torch.rand(256, generator=gen) * 2 - 1
    code[rng.randrange(256)] = 1.0
    code[rng.randrange(256)] = 0.0
    if kind == 1:
        return "random sorted", code.sort().values
    for _ in range(20):
        code[rng.randrange(256)] = code[rng.randrange(256)]
    return "random unsorted with repeats", code


def _differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Flat mask of the elements of a and b (same shape and dtype) that differ bit for bit; any NaN equals any NaN,
    but -0 differs from +0."""
    fa, fb = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    if not fa.is_floating_point():
        return fa != fb
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[fa.dtype]
    return (fa.view(bits) != fb.view(bits)) & ~(torch.isnan(fa) & torch.isnan(fb))


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values bit for bit (_differs)."""
    return a.shape == b.shape and a.dtype == b.dtype and not bool(_differs(a, b).any())


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype} {list(a.shape)} vs {b.dtype} {list(b.shape)}"
    i = int(_differs(a, b).nonzero()[0])
    fa, fb = a.reshape(-1), b.reshape(-1)
    return f"flat index {i}: {fa[i].item()!r} vs reference {fb[i].item()!r}"


def devices() -> list[str]:
    """Every device bnb has kernels for that is present here."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def run_case(seed: int) -> str | None:
    """One random case (8-bit, 4-bit, or a 4-bit product) on every device present, the CPU's under a random
    instruction set, thread count, grain (elements per task) and cpu.amx; a description of the first mismatch, or
    None."""
    rng = random.Random(seed)
    knobs = {"cpu__isa": rng.choice(bnb._C.cpu_isas()), "cpu__threads": rng.randint(1, 4),
             "cpu__grain_elements": rng.choice([1024, 4096, 1 << 16]), "cpu__amx": rng.random() < 0.75}
    check = rng.choice([_check_8bit, _check_8bit, _check_4bit, _check_4bit, _check_gemv, _check_gemm, _check_packed])
    with bnb.config.override(**knobs):
        return check(rng, torch.Generator().manual_seed(seed), f"seed {seed}: {knobs}")


def _special_absmax(rng: random.Random, absmax: torch.Tensor) -> torch.Tensor:
    """absmax, now and then with a NaN or inf for the dequantize kernels (a quantize gives them only where the input
    held one)."""
    absmax = absmax.clone()
    if rng.randrange(3) == 0:
        absmax[rng.randrange(absmax.numel())] = rng.choice([float("nan"), float("inf")])
    return absmax


def _check_8bit(rng: random.Random, gen: torch.Generator, where: str) -> str | None:
    dtype, bs = rng.choice(FLOATS), 32 << rng.randrange(8)
    A = random_tensor(rng, gen, dtype)
    name, code = random_code(rng, gen)
    out_dtype = rng.choice(FLOATS)
    strided_out = A.dim() > 1 and rng.randrange(2) == 1
    where += f", {dtype}, shape {list(A.shape)}, strides {A.stride()}, blocksize {bs}, {name} code"
    rq, rabsmax = ref8.quantize_blockwise(A, code, bs)
    dabsmax = _special_absmax(rng, rabsmax)
    rd = ref8.dequantize_blockwise(rq, dabsmax, code, bs, out_dtype)
    ops = torch.ops.bnb
    for dev in devices():
        at = f"{dev}, {where}"
        c = code.to(dev)
        q, absmax = ops.quantize_blockwise(A.to(dev), c, bs)
        if not same(absmax.cpu(), rabsmax):
            return f"quantize_blockwise absmax, {at}: {first_difference(absmax.cpu(), rabsmax)}"
        if not same(q.cpu(), rq):
            return f"quantize_blockwise codes, {at}: {first_difference(q.cpu(), rq)}"
        q2, absmax2 = torch.empty_like(q), torch.empty_like(absmax)
        ops.quantize_blockwise_into(A.to(dev), c, bs, q2, absmax2)
        if not (same(q2.cpu(), rq) and same(absmax2.cpu(), rabsmax)):
            return f"quantize_blockwise_into, {at}"
        d = ops.dequantize_blockwise(rq.to(dev), dabsmax.to(dev), c, bs, out_dtype)
        if not same(d.cpu(), rd):
            return f"dequantize_blockwise to {out_dtype}, {at}: {first_difference(d.cpu(), rd)}"
        out = torch.empty(rq.shape[::-1], dtype=out_dtype, device=dev).transpose(0, -1) if strided_out \
            else torch.empty(rq.shape, dtype=out_dtype, device=dev)
        ops.dequantize_blockwise.out(rq.to(dev), dabsmax.to(dev), c, bs, out_dtype, out=out)
        if not same(out.cpu(), rd):
            return f"dequantize_blockwise.out to {out_dtype} (out strides {out.stride()}), {at}"
    return None


def _check_4bit(rng: random.Random, gen: torch.Generator, where: str) -> str | None:
    dtype, bs = rng.choice(FLOATS), 32 << rng.randrange(8)
    A = random_tensor(rng, gen, dtype)
    quant_type = rng.choice(["nf4", "fp4"])
    storage = rng.choice([torch.uint8, torch.uint8, torch.float16, torch.float32])
    if (A.numel() + 1) // 2 % storage.itemsize:
        storage = torch.uint8
    out_dtype = rng.choice(FLOATS)
    where += f", {dtype}, shape {list(A.shape)}, strides {A.stride()}, blocksize {bs}, {quant_type}, storage {storage}"
    shape = list(A.shape)
    rp, rabsmax = ref4.quantize_4bit(A, bs, quant_type, storage)
    dabsmax = _special_absmax(rng, rabsmax)
    rd = ref4.dequantize_4bit(rp, dabsmax, bs, quant_type, shape, out_dtype)
    ops = torch.ops.bnb
    for dev in devices():
        at = f"{dev}, {where}"
        p, absmax = ops.quantize_4bit(A.to(dev), bs, quant_type, storage)
        if not same(absmax.cpu(), rabsmax):
            return f"quantize_4bit absmax, {at}: {first_difference(absmax.cpu(), rabsmax)}"
        if p.shape != rp.shape or p.dtype != rp.dtype or not same(p.cpu().view(torch.uint8), rp.view(torch.uint8)):
            return f"quantize_4bit bytes, {at}: {first_difference(p.cpu().view(torch.uint8), rp.view(torch.uint8))}"
        d = ops.dequantize_4bit(rp.to(dev), dabsmax.to(dev), bs, quant_type, shape, out_dtype)
        if not same(d.cpu(), rd):
            return f"dequantize_4bit to {out_dtype}, {at}: {first_difference(d.cpu(), rd)}"
        out = torch.empty(shape, dtype=out_dtype, device=dev)
        ops.dequantize_4bit.out(rp.to(dev), dabsmax.to(dev), bs, quant_type, shape, out_dtype, out=out)
        if not same(out.cpu(), rd):
            return f"dequantize_4bit.out to {out_dtype}, {at}"
    return None


def _product_mismatch(label: str, got: torch.Tensor, A: torch.Tensor, w: torch.Tensor, bias, K: int,
                      weight_rounding: float) -> str | None:
    """got (A's dtype) against the float64 product A @ w.T (+ bias), within float32 summation error (8 sqrt(K)
    units of rounding of the sum of |products|: random-sign errors, far below a single wrong code's), the weight's
    rounding where the kernel takes it rounded (weight_rounding, relative, of each term) and the output's rounding;
    sums past the output type's range may round to +-inf. None where it holds, else what differs."""
    dtype = A.dtype
    want = A.double() @ w.t() + (0 if bias is None else bias.double())
    magnitude = A.double().abs() @ w.abs().t() + (0 if bias is None else bias.double().abs())
    mantissa_bits = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}[dtype]
    # Half an ulp of the output, relative, or absolute among the subnormals.
    half_ulp = 2.0**-(mantissa_bits + 1) * torch.maximum(want.abs(), torch.tensor(torch.finfo(dtype).tiny))
    tolerance = (8 * math.sqrt(K) * 2.0**-24 + weight_rounding) * magnitude + half_ulp
    # Sums beyond the output type's range round to +-inf: float16's largest is 65504, and 65520 on rounds up.
    largest = torch.finfo(dtype).max
    overflow = largest + 2.0 ** (math.floor(math.log2(largest)) - mantissa_bits - 1)
    if got.shape != want.shape or got.dtype != dtype:
        return f"{label} shape or dtype: {got.dtype} {list(got.shape)}"
    rounds_to_inf = torch.isinf(got) & (torch.sign(got.double()) == torch.sign(want)) & \
        (want.abs() + tolerance >= overflow)
    err = (got.double() - want).abs()
    if not bool(((err <= tolerance) | rounds_to_inf).all()):
        i = int((err - tolerance).argmax())
        return f"{label}: output {i} is {got.flatten()[i].item()}, float64 {want.flatten()[i].item()}"
    return None


def _check_gemv(rng: random.Random, gen: torch.Generator, where: str) -> str | None:
    """gemv_4bit against the float64 product of x and the dequantized weight (_product_mismatch's bound; the code
    values rounded to bfloat16 where the kernel multiplies bfloat16). Finite data: a float32 sum and a float64 one
    overflow apart."""
    dtype, bs = rng.choice(FLOATS), 32 << rng.randrange(8)
    N, K = rng.randint(1, 300), rng.randint(1, rng.choice([100, 5000]))
    if rng.randrange(3) == 0:
        K = 128 * rng.randint(1, 40)  # the AVX-512 kernels' rows
    quant_type = rng.choice(["nf4", "fp4"])
    scale = 2.0 ** rng.randint(-8, 8)
    W = (torch.randn(N, K, generator=gen) * scale).to(dtype)
    x = (torch.randn(1, K, generator=gen) * scale).to(dtype)
    where += f", {dtype} x, weight [{N}, {K}], blocksize {bs}, {quant_type}"
    packed, absmax = ref4.quantize_4bit(W, bs, quant_type, torch.uint8)
    code = ref4.code4(quant_type)
    w = ref4.dequantize_with_code(packed, absmax, code, bs, [N, K], torch.float32).double()
    rounding = 2.0**-8 if bnb._C.gemv4_kernel(str(dtype), K) in ("avx512bf16", "highway_bf16") else 0.0
    for dev in devices():
        got = torch.ops.bnb.gemv_4bit(x.to(dev), packed.to(dev), [N, K], absmax.to(dev), code.to(dev), bs).cpu()
        failure = _product_mismatch(f"gemv_4bit, {dev}, {where}", got, x, w, None, K, rounding)
        if failure is not None:
            return failure
    return None


def _check_gemm(rng: random.Random, gen: torch.Generator, where: str) -> str | None:
    """The CPU's gemm_4bit on bitsandbytes' layout, 2 to 60 rows (a small-batch kernel up to 32 rows where one runs,
    else bands of the weight dequantized and addmm), against the float64 product of A and the dequantized weight
    (_product_mismatch's bound, with the weight's rounding where the product takes it rounded: to bfloat16 by the
    AVX-512 bfloat16 kernel, to A's dtype in bands whose products are native in it; the others multiply the
    float32 weight)."""
    dtype, bs = rng.choice(FLOATS), 32 << rng.randrange(8)
    N, M = rng.randint(1, 200), rng.randint(2, 60)
    K = 128 * rng.randint(1, 24) if rng.randrange(2) else rng.randint(1, 3000)  # the small-batch kernels' K, or any
    quant_type = rng.choice(["nf4", "fp4"])
    scale = 2.0 ** rng.randint(-8, 8)
    W = (torch.randn(N, K, generator=gen) * scale).to(dtype)
    A = (torch.randn(M, K, generator=gen) * scale).to(dtype)
    bias = (torch.randn(N, generator=gen) * scale).to(dtype) if rng.randrange(2) else None
    small = bnb._C.gemm4_small_kernel(str(dtype), M, K)
    where += f", {dtype} A [{M}, {K}], weight [{N}, {K}], blocksize {bs}, {quant_type}, bias {bias is not None}, " \
             f"small-batch kernel {small}"
    B, absmax = ref4.quantize_4bit(W, bs, quant_type, torch.uint8)
    w = ref4.dequantize_with_code(B, absmax, ref4.code4(quant_type), bs, [N, K], torch.float32).double()
    if small != "none":
        rounding = 2.0**-8 if small == "avx512bf16" else 0.0
    elif dtype != torch.float32 and bnb._C.cpu_native_products(str(dtype)):
        rounding = 2.0**-({torch.float16: 10, torch.bfloat16: 7}[dtype] + 1)
    else:
        rounding = 0.0
    got = torch.ops.bnb.gemm_4bit(A, B, [N, K], absmax, bs, quant_type, bias)
    return _product_mismatch(f"gemm_4bit, cpu, {where}", got, A, w, bias, K, rounding)


def _check_packed(rng: random.Random, gen: torch.Generator, where: str) -> str | None:
    """pack_4bit and unpack_4bit against the reference's layout, bit for bit; gemm_4bit_packed over it, 1 to 300
    rows (past one kernel call's rows: slices, or bfloat16 bands of the weight and addmm), against the float64
    product of A and the dequantized weight (_product_mismatch's bound, with the weight's rounding where the
    product takes it rounded: the code values to bfloat16 (the bfloat16 kernel, or its weight for addmm), or the
    dequantized weight to A's dtype (no kernel under the cap: ATen ops))."""
    dtype = rng.choice(FLOATS)
    K = 64 * rng.randint(1, 48)
    bs = rng.choice([b for b in (64, 128, 256, 512, 1024, 2048, 4096) if K % b == 0])
    N, M = rng.randint(1, 100), rng.choice([1, rng.randint(2, 40), rng.randint(41, 300)])
    quant_type = rng.choice(["nf4", "fp4"])
    scale = 2.0 ** rng.randint(-8, 8)
    W = (torch.randn(N, K, generator=gen) * scale).to(dtype)
    A = (torch.randn(M, K, generator=gen) * scale).to(dtype)
    bias = (torch.randn(N, generator=gen) * scale).to(dtype) if rng.randrange(2) else None
    where += f", {dtype} A [{M}, {K}], weight [{N}, {K}], blocksize {bs}, {quant_type}, bias {bias is not None}"
    B, absmax = ref4.quantize_4bit(W, bs, quant_type, torch.uint8)
    code = ref4.code4(quant_type)
    codes, scales = torch.ops.bnb.pack_4bit(B, [N, K], absmax, bs)
    want_codes, want_scales = ref4.pack_4bit(B, [N, K], absmax, bs)
    if not (torch.equal(codes, want_codes) and torch.equal(scales, want_scales)):
        return f"pack_4bit, {where}: {first_difference(codes, want_codes)}"
    back = torch.ops.bnb.unpack_4bit(codes, [N, K])
    if not torch.equal(back, B.reshape(-1)):
        return f"unpack_4bit, {where}: {first_difference(back, B.reshape(-1))}"
    w = ref4.dequantize_with_code(B, absmax, code, bs, [N, K], torch.float32).double()
    mantissa_bits = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}[dtype]
    if not bnb._C.gemm4_packed_runs(str(dtype), 1):  # no kernel: W dequantized in A's dtype, then at::linear
        rounding = 2.0**-(mantissa_bits + 1)
    else:  # the bfloat16 kernel (or dense product) rounds code values or the weight to bfloat16
        rounding = 2.0**-8 if dtype == torch.bfloat16 else 0.0
    got = torch.ops.bnb.gemm_4bit_packed(A, codes, scales, [N, K], bs, code, bias)
    return _product_mismatch(f"gemm_4bit_packed, {where}", got, A, w, bias, K, rounding)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cases", type=int, default=None, help="stop after this many cases (default: time only)")
    ap.add_argument("--seed", type=int, default=None, help="first case's seed (default: from the clock)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000_007
    print(f"fuzzing the ops on {', '.join(devices())} for {args.seconds:.0f} s from seed {seed}", flush=True)
    start, cases = time.monotonic(), 0
    while time.monotonic() - start < args.seconds and (args.cases is None or cases < args.cases):
        failure = run_case(seed + cases)
        if failure is not None:
            print("MISMATCH", failure)
            return 1
        cases += 1
    print(f"{cases} cases, no mismatch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
