"""bnb's ops on the test device bnbdev, served by the backend BNBDEV_BACKEND names (device_backend.py): the dispatch
table names it for every op, it is the kernel that runs, and every result equals the CPU's bit for bit: each op's
example (bnb.reference.OPS) and larger cases through bnb.functional."""

import pytest
import torch

import bnb
from bnb import dispatch
from bnb import functional as F
from bnb.dispatch_trace import trace
from device_backend import BACKEND, COMPOSES_PRODUCTS, DEV, kernel_calls, op, outputs, served_as_expected
from helpers import assert_same_bits, sample

OPS = dispatch.op_names()
CPU = torch.device("cpu")


def expected_on_cpu(name: str, args, kwargs):
    """The CPU's result: bnb's CPU kernel; for the reference's gemv_4bit and gemm_4bit, the reference on the CPU
    (bnb/core's vectorized gemv and small-batch kernels sum in another order: close, not equal, to the reference's
    float32 matmul, gemv4.h); the same for gemm_4bit of 16-bit A where the CPU has no instructions for its products
    (bnb multiplies it in float32 there: bnb._C.cpu_native_products) and the backend composes dequantize and a
    matmul in A's dtype (COMPOSES_PRODUCTS)."""
    widened = (COMPOSES_PRODUCTS and name.startswith("gemm_4bit")
               and not bnb._C.cpu_native_products(str(args[0].dtype)))
    if widened or BACKEND == "reference" and name.startswith(("gemv_4bit", "gemm_4bit")):
        return bnb.reference.OPS[name].kernel(*args, **kwargs)
    return op(name)(*args, **kwargs)


@pytest.mark.parametrize("name", OPS)
def test_the_dispatch_table_names_the_backend_for_every_op(name):
    assert served_as_expected(dispatch.served(f"bnb::{name}", "PrivateUse1")), dispatch.op_table(name)
    assert dispatch.served(f"bnb::{name}", "CPU").kind == "bnb"  # the other keys keep bnb's own
    assert dispatch.served(f"bnb::{name}", "Meta").kind == ("fake" if bnb.reference.OPS[name].fake else "bnb")


@pytest.mark.parametrize("name", OPS)
def test_every_ops_example_runs_the_backends_kernel_and_equals_the_cpu_bit_for_bit(name):
    args, kwargs = bnb.reference.OPS[name].example(DEV)
    # gemm_4bit's library kernel (ops.h) multiplies by dequantizing through the dispatcher: its dequantize_4bit runs.
    # The int8 compositions (ops.h) call several of the backend's kernels, each counted under the op's name.
    counted = "dequantize_4bit" if BACKEND == "library" and name == "gemm_4bit" else name
    before = kernel_calls(counted)
    steps, result = trace(op(name), args, kwargs)
    ran = [s for s in steps if s.depth == 0 and s.key == "PrivateUse1"]
    assert len(ran) == 1 and served_as_expected(ran[0].served), steps[:3]
    if BACKEND == "reference":
        assert kernel_calls(counted) == before
    else:
        assert kernel_calls(counted) > before
    got = outputs(result, args, kwargs)
    assert all(t.device.type == "bnbdev" for t in got)
    cpu_args, cpu_kwargs = bnb.reference.OPS[name].example(CPU)
    want = outputs(expected_on_cpu(name, cpu_args, cpu_kwargs), cpu_args, cpu_kwargs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_bits(g.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_8bit_round_trip_of_a_larger_tensor_with_special_values(dtype):
    x = sample(333 * 1000, dtype, seed=1, specials=True).view(1000, 333)
    results = {}
    for device in (CPU, DEV):
        q, state = F.quantize_blockwise(x.to(device), blocksize=256, nested=True)
        results[device.type] = [q, state.absmax, state.state2.absmax, state.offset,
                                F.dequantize_blockwise(q, state)]
    for g, w in zip(results["bnbdev"], results["cpu"]):
        assert g.device.type == "bnbdev"
        assert_same_bits(g.cpu(), w)


@pytest.mark.parametrize("quant_type, dtype, storage", [("nf4", torch.bfloat16, torch.uint8),
                                                        ("fp4", torch.float16, torch.bfloat16),
                                                        ("nf4", torch.float32, torch.float32)])
def test_4bit_round_trip_and_products_of_a_larger_weight(quant_type, dtype, storage):
    W = sample(512 * 4096, dtype, seed=2).view(512, 4096)
    x1 = sample(4096, dtype, seed=3).view(1, 4096)
    xs = sample(5 * 4096, dtype, seed=4).view(5, 4096)
    results = {}
    for device in (CPU, DEV):
        packed, state = F.quantize_4bit(W.to(device), blocksize=128, compress_statistics=True, quant_type=quant_type,
                                        quant_storage=storage)
        if device == CPU and BACKEND == "reference":  # see expected_on_cpu
            row = bnb.reference.OPS["gemv_4bit"].kernel(x1, packed, list(state.shape), F._absmax_of(state),
                                                        state.code, state.blocksize)
        else:
            row = F.gemv_4bit(x1.to(device), packed, state=state)
        if device == CPU and BACKEND != "python":
            # The reference and the library backend have no small-batch kernel (bnb/core's, which the CPU runs on
            # AVX-512; the python backend runs the CPU's op): their gemm_4bit dequantizes and multiplies, as the
            # CPU does wherever it has none.
            batch = torch.nn.functional.linear(xs, F.dequantize_4bit(packed, state))
        else:
            with bnb.config.override(cpu__pack_4bit=False):  # gemm_4bit on both (the CPU's tiled copy rounds otherwise)
                batch = bnb.matmul_4bit(xs.to(device), packed, state)
        results[device.type] = [packed, state.absmax, state.state2.absmax, F.dequantize_4bit(packed, state), row,
                                batch]
    for g, w in zip(results["bnbdev"], results["cpu"]):
        assert g.device.type == "bnbdev"
        assert_same_bits(g.cpu(), w)
