"""The operators as the dispatcher sees them: opcheck, torch.compile, Meta shapes, bad input, the fallback kernel."""

import re

import pytest
import torch
from torch.library import opcheck

import bnb
from bnb import functional as F
from bnb.reference import blockwise8 as ref
from helpers import FLOAT_DTYPES, assert_same_bits, devices

CODE = F.create_dynamic_map()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_opcheck(device, dtype):
    A = torch.randn(3, 1000, dtype=dtype, device=device)
    code = CODE.to(device)
    opcheck(torch.ops.bnb.quantize_blockwise.default, (A, code, 256))
    # bitsandbytes' tests pass the packet: it must be the one overload bitsandbytes' schema has.
    assert torch.ops.bnb.quantize_blockwise.overloads() == ["default"]
    opcheck(torch.ops.bnb.quantize_blockwise, (A, code, 256))
    q, absmax = torch.ops.bnb.quantize_blockwise(A, code, 256)
    opcheck(torch.ops.bnb.quantize_blockwise_into, (A, code, 256, torch.empty_like(q), torch.empty_like(absmax)))
    opcheck(torch.ops.bnb.dequantize_blockwise.default, (q, absmax, code, 256, dtype))
    out = torch.empty_like(A)
    opcheck(torch.ops.bnb.dequantize_blockwise.out, (q, absmax, code, 256, dtype), {"out": out})


@pytest.mark.parametrize("device", devices())
def test_compile_fullgraph(device):
    code = CODE.to(device)

    def roundtrip(x):
        q, absmax = torch.ops.bnb.quantize_blockwise(x, code, 64)
        return torch.ops.bnb.dequantize_blockwise(q, absmax, code, 64, x.dtype) * 2 + 1

    x = torch.randn(4, 4096, device=device)
    compiled = torch.compile(roundtrip, fullgraph=True, backend="inductor")
    assert_same_bits(compiled(x), roundtrip(x))


def test_compile_fullgraph_of_the_functional_api_as_a_process_first_uses_it():
    # A fresh process: the default code (code=None) must not first be made inside the traced function.
    import subprocess
    import sys
    code = ("import torch, bnb.functional as F\n"
            "f = lambda x: F.dequantize_blockwise(*F.quantize_blockwise(x, blocksize=256)) * 2\n"
            "x = torch.randn(4096)\n"
            "got = torch.compile(f, fullgraph=True)(x)\n"
            "assert torch.equal(got, f(x)), 'compiled and eager differ'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]


def test_meta_shapes():
    A = torch.empty(7, 1000, device="meta", dtype=torch.bfloat16)
    q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE.to("meta"), 256)
    assert q.shape == A.shape and q.dtype == torch.uint8 and q.device.type == "meta"
    assert absmax.shape == (28,) and absmax.dtype == torch.float32
    out = torch.ops.bnb.dequantize_blockwise(q, absmax, CODE.to("meta"), 256, torch.float16)
    assert out.shape == A.shape and out.dtype == torch.float16
    with pytest.raises(RuntimeError, match="absmax must hold 28 values"):  # Meta shares the real kernel's checks
        torch.ops.bnb.dequantize_blockwise(q, absmax[:5], CODE.to("meta"), 256, torch.float16)


BNB_OPS = sorted(n.removeprefix("bnb::") for n in torch._C._dispatch_get_all_op_names() if n.startswith("bnb::"))


def dispatch_table(name: str) -> dict:
    """bnb::<name>'s dispatch table, dispatch key -> what serves it, from the dispatcher itself."""
    rows = (line.partition(": ") for line in torch._C._dispatch_dump_table(f"bnb::{name}").splitlines())
    return {key: served for key, _, served in rows}


def overload(name: str):
    base, _, over = name.partition(".")
    return getattr(getattr(torch.ops.bnb, base), over or "default")


def test_every_op_has_one_reference_kernel_with_its_facts():
    assert len(BNB_OPS) >= 10
    assert sorted(bnb.reference.OPS) == BNB_OPS


@pytest.mark.parametrize("name", BNB_OPS)
def test_every_op_has_its_backend_kernels_and_an_autograd_rule(name):
    rows = dispatch_table(name)
    info = bnb.reference.OPS[name]
    for key in ("CPU", "CUDA", "Meta"):  # bnb's own, from its family's backend file
        if key == "Meta" and info.fake is not None:  # outputs sized by the data: the reference's Python fake
            assert re.fullmatch(r"registered at .*bnb/reference/__init__\.py:\d+ \[kernel\]", rows[key]), rows
            continue
        assert re.fullmatch(rf"registered at .*bnb/ops/\w+/{key.lower()}\.cc:\d+ \[kernel\]", rows[key]), (key, rows)
    # Every other device: the reference kernel, through CompositeExplicitAutograd.
    assert re.fullmatch(r"registered at .*bnb/reference/__init__\.py:\d+ \[default backend kernel\]",
                        rows["PrivateUse1"]), rows
    # An autograd formula where the op is differentiable, else an explicit fall-through (outputs never need grad).
    if info.differentiable:
        assert re.fullmatch(r"registered at .*torch/library\.py:\d+ \[autograd kernel\]", rows["AutogradCPU"]), rows
    else:
        assert re.fullmatch(r"fallthrough registered at .*bnb/reference/__init__\.py:\d+ \[autograd kernel\]",
                            rows["AutogradCPU"]), rows
    # Ops that write an argument write through negative views too (derived from the schema).
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in overload(name)._schema.arguments)
    assert ("bnb/ops/common/negative_views.cc" in rows["Negative"]) == writes, rows["Negative"]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", BNB_OPS)
def test_every_op_passes_opcheck_on_its_example(name, device):
    args, kwargs = bnb.reference.OPS[name].example(torch.device(device))
    opcheck(overload(name), args, kwargs)


def test_reference_kernel_is_the_default_for_other_backends():
    table = torch._C._dispatch_dump_table("bnb::quantize_blockwise")
    assert re.search(r"CPU: registered at .*blockwise8/cpu\.cc.*\[kernel\]", table)
    assert re.search(r"Meta: registered at .*blockwise8/meta\.cc.*\[kernel\]", table)
    assert re.search(r"PrivateUse1: registered at .*reference.*\[default backend kernel\]", table)
    # Run the kernel a device without its own would get: the Python reference.
    A = torch.randn(3000)
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    q, absmax = torch.ops.bnb.quantize_blockwise.default.redispatch(keyset, A, CODE, 128)
    want = torch.ops.bnb.quantize_blockwise(A, CODE, 128)
    assert_same_bits(q, want[0])
    assert_same_bits(absmax, want[1])


A32 = torch.randn(1000)


@pytest.mark.parametrize("call, message", [
    (lambda: torch.ops.bnb.quantize_blockwise(A32.int(), CODE, 64),
     "A must be float32, float16 or bfloat16, got int32"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32.double(), CODE, 64), "got float64"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32, CODE, 100),
     "blocksize must be a power of two in [32, 1073741824], got 100"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32, CODE, 16), "got 16"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32, CODE, 2**31), "got 2147483648"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32, CODE[:255], 64), "code must hold 256 values"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32, CODE.half(), 64), "code must be float32, got float16"),
    (lambda: torch.ops.bnb.quantize_blockwise(A32, torch.full((256,), float("nan")), 64), "code[0] is nan"),
    (lambda: torch.ops.bnb.quantize_blockwise(torch.empty(0, 4), CODE, 64), "A is empty (shape [0, 4])"),
    (lambda: torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, torch.empty(999, dtype=torch.uint8),
                                                  torch.empty(16)), "out must have A's shape [1000], got [999]"),
    (lambda: torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, torch.empty(1000, dtype=torch.int8),
                                                  torch.empty(16)), "out must be uint8, got int8"),
    (lambda: torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, torch.empty(1000, dtype=torch.uint8),
                                                  torch.empty(15)), "absmax must hold 16 values (one per block of A)"),
    (lambda: torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, torch.empty(1000, dtype=torch.uint8),
                                                  torch.empty(16).double()), "absmax must be float32, got float64"),
    (lambda: torch.ops.bnb.dequantize_blockwise(torch.zeros(1000, dtype=torch.uint8), torch.ones(3), CODE, 64,
                                                torch.float32), "absmax must hold 16 values (one per block of A), got 3"),
    (lambda: torch.ops.bnb.dequantize_blockwise(torch.zeros(1000, dtype=torch.uint8), torch.ones(16).half(), CODE,
                                                64, torch.float32), "absmax must be float32, got float16"),
    (lambda: torch.ops.bnb.dequantize_blockwise(torch.zeros(1000, dtype=torch.int8), torch.ones(16), CODE, 64,
                                                torch.float32), "A must be uint8, got int8"),
    (lambda: torch.ops.bnb.dequantize_blockwise(torch.zeros(1000, dtype=torch.uint8), torch.ones(16), CODE, 64,
                                                torch.int32), "dtype must be float32, float16 or bfloat16, got int32"),
    (lambda: torch.ops.bnb.dequantize_blockwise.out(torch.zeros(1000, dtype=torch.uint8), torch.ones(16), CODE, 64,
                                                    torch.float32, out=torch.empty(999)),
     "out must have A's shape [1000], got [999]"),
    (lambda: torch.ops.bnb.dequantize_blockwise.out(torch.zeros(1000, dtype=torch.uint8), torch.ones(16), CODE, 64,
                                                    torch.float32, out=torch.empty(1000).half()),
     "out must be float32, got float16"),
])
def test_bad_input_gives_a_clear_error(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


def test_out_sharing_memory_with_absmax_is_an_error():
    buf = torch.zeros(1064, dtype=torch.uint8)
    out, absmax = buf[:1000], buf[1000:].view(torch.float32)
    torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, out, absmax)  # adjacent, not overlapping: fine
    assert_same_bits(absmax, torch.ops.bnb.quantize_blockwise(A32, CODE, 64)[1])
    shared = torch.zeros(1000, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="out and absmax share memory"):  # absmax was silently clobbered
        torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, shared, shared[:64].view(torch.float32))


def test_out_that_requires_grad_is_refused_as_torch_does():
    q, absmax = torch.ops.bnb.quantize_blockwise(A32, CODE, 64)
    leaf = torch.zeros(1000, requires_grad=True)
    with pytest.raises(RuntimeError, match="out requires grad; out= arguments do not support automatic diff"):
        torch.ops.bnb.dequantize_blockwise.out(q, absmax, CODE, 64, torch.float32, out=leaf)
    assert not leaf.detach().any()
    with torch.no_grad():  # as torch allows: nothing is recorded
        torch.ops.bnb.dequantize_blockwise.out(q, absmax, CODE, 64, torch.float32, out=leaf)
    assert_same_bits(leaf.detach(), torch.ops.bnb.dequantize_blockwise(q, absmax, CODE, 64, torch.float32))
    # quantize_blockwise_into writes absmax in place too, and F.quantize_blockwise(absmax=) through it.
    leaf_absmax = torch.zeros(16, requires_grad=True)
    with pytest.raises(RuntimeError, match="absmax requires grad; out= arguments do not support"):
        torch.ops.bnb.quantize_blockwise_into(A32, CODE, 64, torch.zeros(1000, dtype=torch.uint8), leaf_absmax)
    with pytest.raises(RuntimeError, match="absmax requires grad"):
        F.quantize_blockwise(A32, blocksize=64, absmax=leaf_absmax)
    assert not leaf_absmax.detach().any()


def test_reference_rejects_what_the_kernel_rejects_with_the_same_exception():
    # RuntimeError on every device: code that catches the CPU kernel's error catches another backend's.
    with pytest.raises(RuntimeError, match="blocksize must be a power of two"):
        ref.quantize_blockwise(A32, CODE, 100)
    with pytest.raises(RuntimeError, match="blocksize must be a power of two"):
        torch.ops.bnb.quantize_blockwise(A32, CODE, 100)
    with pytest.raises(RuntimeError, match="absmax must hold 16 values"):
        ref.dequantize_blockwise(torch.zeros(1000, dtype=torch.uint8), torch.ones(3), CODE, 64, torch.float32)


def test_import_compiles_nothing_and_leaves_cuda_alone():
    import subprocess
    import sys
    code = ("import torch, time; t = time.perf_counter(); import bnb; dt = time.perf_counter() - t; "
            "assert not torch.cuda.is_initialized(); print(dt)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 2.0  # generous: the figure is reported by tools/bench, not judged here


def _negative_view(n, dtype=torch.float32):
    """A tensor with the negative bit set (is_neg()), as x.conj().imag gives one: reads are negated storage."""
    complex_dtype = {torch.float32: torch.complex64, torch.float64: torch.complex128}[dtype]
    out = torch.zeros(n, dtype=complex_dtype).conj().imag
    assert out.is_neg()
    return out


def test_out_overloads_write_through_negative_views():
    # torch's fallback for negative views aborted the process on these (they return (), not their outs).
    A = torch.randn(1000)
    q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE, 64)
    out = _negative_view(1000)
    torch.ops.bnb.dequantize_blockwise.out(q, absmax, CODE, 64, torch.float32, out=out)
    assert_same_bits(out.clone(), torch.ops.bnb.dequantize_blockwise(q, absmax, CODE, 64, torch.float32))
    q2, a2 = torch.empty_like(q), _negative_view(absmax.numel())
    torch.ops.bnb.quantize_blockwise_into(A, CODE, 64, q2, a2)
    assert torch.equal(q2, q) and torch.equal(a2.clone(), absmax)
    packed, a4 = torch.ops.bnb.quantize_4bit(A, 64, "nf4", torch.uint8)
    out4 = _negative_view(1000)
    torch.ops.bnb.dequantize_4bit.out(packed, a4, 64, "nf4", [1000], torch.float32, out=out4)
    assert_same_bits(out4.clone(), torch.ops.bnb.dequantize_4bit(packed, a4, 64, "nf4", [1000], torch.float32))
    neg_input = torch.zeros(1000, dtype=torch.complex64).conj().imag.copy_(A)  # a negative-view input
    assert neg_input.is_neg()
    assert torch.equal(torch.ops.bnb.quantize_blockwise(neg_input, CODE, 64)[0], q)


def test_gemm_4bit_arguments_on_another_device_are_errors():
    packed, absmax = torch.ops.bnb.quantize_4bit(torch.randn(10, 100), 64, "nf4", torch.uint8)
    A = torch.randn(3, 100)
    with pytest.raises(RuntimeError, match="bnb::gemm_4bit: B is on meta but A is on cpu"):
        torch.ops.bnb.gemm_4bit(A, packed.to("meta"), [10, 100], absmax, 64, "nf4")
    with pytest.raises(RuntimeError, match="bnb::gemm_4bit: bias is on meta but A is on cpu"):
        torch.ops.bnb.gemm_4bit(A, packed, [10, 100], absmax, 64, "nf4", bias=torch.randn(10, device="meta"))
    with pytest.raises(RuntimeError, match=r"bias must be a vector of 10 values, got shape \[2, 5\]"):
        torch.ops.bnb.gemm_4bit(A, packed, [10, 100], absmax, 64, "nf4", bias=torch.randn(2, 5))


def test_gemm_4bit_with_bias_under_dynamic_shapes():
    packed, absmax = torch.ops.bnb.quantize_4bit(torch.randn(10, 100), 64, "nf4", torch.uint8)
    A, bias = torch.randn(3, 100), torch.randn(10)
    opcheck(torch.ops.bnb.gemm_4bit.default, (A, packed, [10, 100], absmax, 64, "nf4"), {"bias": bias})
    f = torch.compile(lambda x, b: torch.ops.bnb.gemm_4bit(x, packed, [10, 100], absmax, 64, "nf4", bias=b),
                      fullgraph=True, dynamic=True)
    assert_same_bits(f(A, bias), torch.ops.bnb.gemm_4bit(A, packed, [10, 100], absmax, 64, "nf4", bias=bias))


def _parity_cases():
    """(op name, args) pairs at and around the edges of what the C++ kernels take: 2-D code and absmax (any shape
    with the right count), wrong dtypes, counts and devices, empty and 0-d tensors, wrong out= buffers."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(300, generator=g)
    nan_code, inf_code = CODE.clone(), CODE.clone()
    nan_code[7], inf_code[255] = float("nan"), float("inf")
    q, absmax = torch.ops.bnb.quantize_blockwise(A, CODE, 32)  # 10 blocks
    packed, absmax4 = torch.ops.bnb.quantize_4bit(A, 64, "nf4", torch.uint8)  # 150 bytes, 5 blocks
    W = torch.randn(8, 64, generator=g)
    B, absmaxB = torch.ops.bnb.quantize_4bit(W, 64, "nf4", torch.uint8)  # 256 bytes, 8 blocks
    code4 = F.get_4bit_type("nf4")
    x = torch.randn(1, 64, generator=g)
    offset = absmaxB.mean()
    q8, nested = torch.ops.bnb.quantize_blockwise(absmaxB - offset, CODE, 256)
    meta = "meta"
    cases = []
    for code in (CODE, CODE.view(1, 256), CODE.view(256, 1), CODE.view(16, 16), CODE.double(), CODE[:255], nan_code,
                 inf_code, CODE.to(meta)):
        cases.append(("quantize_blockwise", (A, code, 32)))
        cases.append(("dequantize_blockwise", (q, absmax, code, 32, torch.float32)))
    for a in (A.view(3, 100).t(), A[:1].reshape(()), torch.empty(0, 4), A.double(), A.int()):
        cases.append(("quantize_blockwise", (a, CODE, 32)))
    for bs in (100, 16, 8192, 2**31):
        cases.append(("quantize_blockwise", (A, CODE, bs)))
        cases.append(("dequantize_blockwise", (q, absmax, CODE, bs, torch.float32)))
    for am in (absmax.view(10, 1), absmax.view(1, 10), absmax.view(2, 5), absmax.double(), absmax.half(), absmax[:9],
               absmax.to(meta)):
        cases.append(("dequantize_blockwise", (q, am, CODE, 32, torch.float32)))
        cases.append(("quantize_blockwise_into", (A, CODE, 32, torch.empty(300, dtype=torch.uint8), am.clone())))
    for qq, dtype in ((q.view(30, 10), torch.float16), (q.view(torch.int8), torch.float32), (q, torch.int32),
                      (q, torch.float64), (torch.empty(0, dtype=torch.uint8), torch.float32)):
        cases.append(("dequantize_blockwise", (qq, absmax if qq.numel() else absmax[:0], CODE, 32, dtype)))
    for out in (torch.empty(300), torch.empty(30, 10), torch.empty(300).half(), torch.empty(300, requires_grad=True),
                torch.empty(300, device=meta)):
        cases.append(("dequantize_blockwise.out", (q, absmax, CODE, 32, torch.float32, out)))
    for out in (torch.empty(300, dtype=torch.uint8), torch.empty(30, 10, dtype=torch.uint8), torch.empty(300)):
        cases.append(("quantize_blockwise_into", (A, CODE, 32, out, torch.empty(10))))

    for a, bs, qt, storage in ((A, 64, "nf4", torch.uint8), (A[:128], 64, "fp4", torch.int32),
                               (A[:128], 64, "nf4", torch.float64), (A[:128], 64, "nf4", torch.bfloat16),
                               (A, 64, "int4", torch.uint8), (A, 100, "nf4", torch.uint8),
                               (torch.empty(0), 64, "nf4", torch.uint8), (A.double(), 64, "nf4", torch.uint8),
                               (A[:1].reshape(()), 64, "nf4", torch.uint8)):
        cases.append(("quantize_4bit", (a, bs, qt, storage)))
    for p, am, shape, dtype in ((packed, absmax4, [300], torch.float32), (packed, absmax4.view(5, 1), [3, 100],
                                                                          torch.bfloat16),
                                (packed, absmax4.view(1, 5), [300], torch.float16),
                                (packed, absmax4.double(), [300], torch.float32),
                                (packed, absmax4[:4], [300], torch.float32),
                                (torch.cat([packed, packed[:1]]), absmax4, [300], torch.float32),
                                (packed.view(-1)[:148].view(torch.int32), absmax4, [296], torch.float32),
                                (packed.view(-1)[:148].view(torch.float16), absmax4, [296], torch.float32),
                                (packed, absmax4, [-3, -100], torch.float32), (packed, absmax4, [0, 300],
                                                                               torch.float32),
                                (packed, absmax4, [300], torch.float64), (packed, absmax4.to(meta), [300],
                                                                          torch.float32),
                                (packed[:1], absmax4[:1], [], torch.float32)):
        cases.append(("dequantize_4bit", (p, am, 64, "nf4", shape, dtype)))
    cases.append(("dequantize_4bit", (packed, absmax4, 64, "af4", [300], torch.float32)))
    cases.append(("dequantize_4bit", (packed, absmax4, 48, "nf4", [300], torch.float32)))
    for out in (torch.empty(300), torch.empty(3, 100), torch.empty(300).half(), torch.empty(300, requires_grad=True)):
        cases.append(("dequantize_4bit.out", (packed, absmax4, 64, "nf4", [300], torch.float32, out)))

    for c in (code4, code4.view(1, 16), code4.view(16, 1), code4.view(4, 4), code4.double(), code4[:15],
              torch.cat([code4, code4[:1]]), torch.full((16,), float("nan")), code4.to(meta)):
        cases.append(("gemv_4bit", (x, B, [8, 64], absmaxB, c, 64)))
    for xx in (x.view(1, 1, 64), x.view(64), x.double(), x.half(), x.expand(2, 64), x[:, :1].reshape(()),
               x[:, :32]):
        cases.append(("gemv_4bit", (xx, B, [8, 64], absmaxB, code4, 64)))
    for bb, shapeB, am, bs in ((B, [8, 64], absmaxB.view(8, 1), 64), (B, [8, 64], absmaxB.double(), 64),
                               (B, [8, 64], absmaxB, 100), (B, [8, 64, 1], absmaxB, 64), (B, [0, 64], absmaxB, 64),
                               (torch.cat([B, B[:1]]), [8, 64], absmaxB, 64), (B.view(torch.int8), [8, 64], absmaxB,
                                                                               64),
                               (B.to(meta), [8, 64], absmaxB, 64)):
        cases.append(("gemv_4bit", (x, bb, shapeB, am, code4, bs)))
    for out in (torch.empty(1, 8), torch.empty(8), torch.empty(1, 8).double(), torch.empty(1, 8, requires_grad=True)):
        cases.append(("gemv_4bit.out", (x, B, [8, 64], absmaxB, code4, 64, {"out": out})))
    # Nested statistics (gemm_4bit's rules), and the out= overload with them.
    for am, a8, acode, aoff in ((nested, q8, CODE, offset), (nested.view(1, 1), q8.view(8, 1), CODE.view(1, 256),
                                                              offset.view(1)),
                                (nested, q8, CODE, offset.view(1).int()), (nested, q8, CODE, torch.stack([offset] * 2)),
                                (nested, q8, nan_code, offset), (nested, q8, CODE.double(), offset),
                                (nested, q8.float(), CODE, offset), (nested, q8[:7], CODE, offset),
                                (nested, q8, None, None), (absmaxB, None, CODE, None),
                                (nested.double(), q8, CODE, offset), (absmaxB, q8, CODE, offset)):
        cases.append(("gemv_4bit", (x, B, [8, 64], am, code4, 64, a8, acode, aoff)))
    cases.append(("gemv_4bit.out", (x, B, [8, 64], nested, code4, 64, q8, CODE, offset, {"out": torch.empty(1, 8)})))

    X = torch.randn(3, 64, generator=g)
    for args in ((absmaxB, None, None, None, None), (absmaxB.view(8, 1), None, None, None, None),
                 (absmaxB.double(), None, None, None, None), (absmaxB, torch.randn(8), None, None, None),
                 (absmaxB, torch.randn(1, 8), None, None, None), (absmaxB, torch.randn(8).double(), None, None, None),
                 (absmaxB, torch.randn(7), None, None, None),
                 (nested, None, q8, CODE, offset), (nested.view(1, 1), None, q8.view(8, 1), CODE.view(1, 256),
                                                    offset.view(1)),
                 (nested, None, q8, CODE, offset.view(1, 1).double()), (nested, None, q8, CODE, offset.view(1).int()),
                 (nested, None, q8, CODE, torch.stack([offset, offset])), (nested, None, q8, nan_code, offset),
                 (nested, None, q8, CODE.double(), offset), (nested, None, q8.float(), CODE, offset),
                 (nested, None, q8[:7], CODE, offset), (nested, None, q8, None, None),
                 (absmaxB, None, None, CODE, None),
                 (nested.double(), None, q8, CODE, offset)):
        am, bias, a8, acode, aoff = args
        cases.append(("gemm_4bit", (X, B, [8, 64], am, 64, "nf4", bias, a8, acode, aoff)))
    for xx, shapeB, qt, bs in ((X.double(), [8, 64], "nf4", 64), (X[:, :32], [8, 64], "nf4", 64),
                               (X, [8, 64, 1], "nf4", 64), (X, [8, 64], "int4", 64), (X, [8, 64], "nf4", 100),
                               (X[0, 0].reshape(()), [8, 1], "nf4", 64)):
        cases.append(("gemm_4bit", (xx, B, shapeB, absmaxB, bs, qt)))
    return cases


_PARITY = _parity_cases()


def _outcome(fn, args):
    """(results and tensor arguments after the call, None), or (None, the RuntimeError's text). A dict last in
    args holds keyword arguments (out= of schemas where it is keyword-only)."""
    kwargs = args[-1] if args and isinstance(args[-1], dict) else {}
    fresh = lambda a: a.clone() if isinstance(a, torch.Tensor) and a.device.type != "meta" else a  # noqa: E731
    args = [fresh(a) for a in (args[:-1] if kwargs else args)]
    kwargs = {k: fresh(v) for k, v in kwargs.items()}
    try:
        result = fn(*args, **kwargs)
    except RuntimeError as e:
        return None, str(e)
    results = result if isinstance(result, (tuple, list)) else [result]
    return [r for r in results if r is not None] + [a for a in [*args, *kwargs.values()]
                                                    if isinstance(a, torch.Tensor)], None


@pytest.mark.parametrize("op, args", _PARITY, ids=[f"{i}-{op}" for i, (op, _) in enumerate(_PARITY)])
def test_reference_kernels_take_exactly_what_the_cpu_kernels_take(op, args):
    # The references are the kernels of every device without its own: one acceptance rule on every device. Each
    # input either runs on both, bit for bit alike (results and out= buffers), or is a RuntimeError on both.
    name, _, overload = op.partition(".")
    cpu = getattr(getattr(torch.ops.bnb, name), overload or "default")
    got, got_error = _outcome(cpu, args)
    want, want_error = _outcome(bnb.reference.OPS[op].kernel, args)
    assert (got_error is None) == (want_error is None), f"C++: {got_error or 'accepted'}; reference: " \
                                                        f"{want_error or 'accepted'}"
    if got is not None:
        assert len(got) == len(want)
        for a, b in zip(got, want):
            if name.startswith("gem"):  # the products accumulate in another order: equal up to rounding
                torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-5, equal_nan=True)
            else:
                assert_same_bits(a.detach(), b.detach())
