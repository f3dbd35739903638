"""The QLoRA path on the test device bnbdev, with the backend BNBDEV_BACKEND names (device_backend.py):
Linear4bit.to(device) quantizes there, forward and backward, state dicts, fake tensors and torch.compile, each equal
to the same on the CPU bit for bit."""

import contextlib
import io

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import bnb
from bnb.dispatch_trace import KernelTrace
from device_backend import BACKEND, COMPOSES_PRODUCTS, DEV, kernel_calls, op, outputs, served_as_expected
from helpers import assert_same_bits

IN, OUT = 96, 40


def layer(device, quant_type="nf4", compute_dtype=torch.float32):
    torch.manual_seed(0)
    dense = torch.nn.Linear(IN, OUT)
    m = bnb.nn.Linear4bit(IN, OUT, quant_type=quant_type, compute_dtype=compute_dtype)
    m.load_state_dict(dense.state_dict())
    return m.to(device)


@contextlib.contextmanager
def cpu_runs_the_reference(*names):
    """The CPU serves `names` with the reference kernels, as bnbdev does with no backend of its own: bnb/core's
    gemv sums in another order than the reference's float32 matmul (close, not equal; gemv4.h)."""
    lib = torch.library.Library("bnb", "IMPL")
    try:
        for name in names:
            lib.impl(name, bnb.reference.OPS[name].kernel, "CPU")
        yield
    finally:
        lib._destroy()


def same_kernels_on_the_cpu(dtype=torch.float32):
    """The CPU serves the 4-bit products as bnbdev does: gemv_4bit by the reference where bnbdev has no backend of
    its own, and gemm_4bit by it wherever the CPU multiplies A of `dtype` in float32 (a 16-bit dtype without
    instructions for its products there: bnb._C.cpu_native_products) while bnbdev's backend dequantizes and
    multiplies in A's dtype (COMPOSES_PRODUCTS)."""
    names = ["gemv_4bit", "gemv_4bit.out"] if BACKEND == "reference" else []
    if COMPOSES_PRODUCTS and not bnb._C.cpu_native_products(str(dtype)):
        names.append("gemm_4bit")
    return cpu_runs_the_reference(*names) if names else contextlib.nullcontext()


def test_to_device_quantizes_there_with_the_backends_kernel():
    before = kernel_calls("quantize_4bit")
    mode = KernelTrace()
    with mode:
        m = layer(DEV)
    ran = [s for s in mode.steps if s.op == "bnb::quantize_4bit" and s.key == "PrivateUse1"]
    assert len(ran) == 1 and ran[0].key == "PrivateUse1" and served_as_expected(ran[0].served), ran
    assert kernel_calls("quantize_4bit") == before + (0 if BACKEND == "reference" else 1)
    w, state = m.weight, m.weight.quant_state
    assert type(w).__name__ == "Params4bit" and w.bnb_quantized and w.device.type == "bnbdev"
    assert state.absmax.device.type == "bnbdev" and state.state2.absmax.device.type == "bnbdev"
    cpu = layer("cpu")
    for got, want in ((w, cpu.weight), (state.absmax, cpu.weight.quant_state.absmax),
                      (state.state2.absmax, cpu.weight.quant_state.state2.absmax)):
        assert_same_bits(got.detach().cpu(), want.detach())


def test_a_device_whose_tensors_a_cpu_parameter_cannot_take_is_named():
    lib = torch.library.Library("aten", "IMPL")  # bnbdev as if it lacked _has_compatible_shallow_copy_type
    try:
        lib.impl("_has_compatible_shallow_copy_type", lambda self, other: False, "PrivateUse1")
        with pytest.raises(RuntimeError, match=r"Params4bit: a cpu parameter cannot hold codes on bnbdev: torch counts "
                                               r"them as incompatible tensor types\. A PrivateUse1 device's library "
                                               r"registers aten::_has_compatible_shallow_copy_type"):
            layer(DEV)
    finally:
        lib._destroy()
    assert layer(DEV).weight.device.type == "bnbdev"


@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("compute_dtype", [torch.float32, torch.bfloat16])
def test_forward_and_backward_equal_the_cpu(rows, compute_dtype):
    x = torch.randn(rows, IN, generator=torch.Generator().manual_seed(1))
    results = []
    for device in (DEV, torch.device("cpu")):
        m = layer(device, compute_dtype=compute_dtype)
        xd = x.to(device).requires_grad_(rows > 1)  # one row without grad takes gemv_4bit, more gemm_4bit
        with same_kernels_on_the_cpu(compute_dtype) if device.type == "cpu" else contextlib.nullcontext():
            y = m(xd)
        out = [y.detach()]
        if rows > 1:
            y.square().sum().backward()
            out += [xd.grad, m.bias.grad]
        assert all(t.device == xd.device for t in out)
        results.append(out)
    for got, want in zip(*results):
        assert_same_bits(got.cpu(), want)


def test_state_dict_round_trips_on_the_device_and_through_a_file():
    m = layer(DEV)
    x = torch.randn(3, IN).to(DEV)
    want = m(x).detach()
    sd = m.state_dict()  # after a forward: nothing moved the quant state
    assert {k for k, v in sd.items() if v.device.type == "bnbdev"} == {
        "weight", "bias", "weight.absmax", "weight.quant_map", "weight.nested_absmax", "weight.nested_quant_map"}
    fresh = bnb.nn.Linear4bit(IN, OUT, quant_type="nf4", compute_dtype=torch.float32).to(DEV)
    fresh.load_state_dict(sd)
    assert_same_bits(fresh(x).detach().cpu(), want.cpu())
    buf = io.BytesIO()
    torch.save(sd, buf)  # device tensors: torch.load puts them back on bnbdev (torch.bnbdev's device module)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["weight.absmax"].device.type == "bnbdev"
    on_cpu = bnb.nn.Linear4bit(IN, OUT, quant_type="nf4", compute_dtype=torch.float32)
    on_cpu.load_state_dict({k: v.cpu() for k, v in loaded.items()})  # a device checkpoint, loaded on the CPU
    with same_kernels_on_the_cpu():
        assert_same_bits(on_cpu(x.cpu()).detach(), want.cpu())
    assert_same_bits(on_cpu.to(DEV)(x).detach().cpu(), want.cpu())  # and back onto the device


@pytest.mark.parametrize("name", bnb.dispatch.op_names())
def test_fake_tensors_of_device_tensors_take_the_meta_kernels(name):
    args, kwargs = bnb.reference.OPS[name].example(DEV)
    real = outputs(op(name)(*args, **kwargs), args, kwargs)
    args, kwargs = bnb.reference.OPS[name].example(DEV)
    sized_by_data = bnb.reference.OPS[name].fake is not None  # its fake makes unbacked sizes, which need a ShapeEnv
    mode = FakeTensorMode(shape_env=ShapeEnv() if sized_by_data else None)
    fake_args, fake_kwargs = torch.utils._pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
    with mode:
        fake = outputs(op(name)(*fake_args, **fake_kwargs), fake_args, fake_kwargs)
    assert len(fake) == len(real)
    for f, r in zip(fake, real):
        assert isinstance(f, FakeTensor) and (f.dtype, f.device, f.dim()) == (r.dtype, r.device, r.dim())
        if all(isinstance(d, int) for d in f.shape):  # an unbacked size is a symbol, not the data's count
            assert f.shape == r.shape


def test_a_layers_forward_on_fake_device_tensors():
    m = layer(DEV)
    with FakeTensorMode(allow_non_fake_inputs=True):  # the layer's real weights go in as constants
        for rows in (1, 5):
            y = m(torch.empty(rows, IN, device=DEV))
            assert isinstance(y, FakeTensor) and y.shape == (rows, OUT) and y.device == torch.device("bnbdev", 0)


def test_compile_with_aot_eager_has_no_graph_break_and_equals_eager():
    torch._dynamo.reset()
    m = layer(DEV)
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)  # fullgraph: a graph break is an error
    x = torch.randn(6, IN, generator=torch.Generator().manual_seed(2))
    results = []
    for fn in (compiled, m):
        xd = x.to(DEV).requires_grad_()
        y = fn(xd)
        y.square().sum().backward()
        results.append([y.detach(), xd.grad])
        m.zero_grad()
    for got, want in zip(*results):
        assert got.device.type == "bnbdev"
        assert_same_bits(got.cpu(), want.cpu())
