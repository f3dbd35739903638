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


def test_reference_kernel_is_the_default_for_other_backends():
    table = torch._C._dispatch_dump_table("bnb::quantize_blockwise")
    assert re.search(r"CPU: registered at .*blockwise8\.cc.*\[kernel\]", table)
    assert re.search(r"Meta: registered at .*blockwise8\.cc.*\[kernel\]", table)
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
