"""`python -m bnb dispatch [OP] [--trace]` and the modules behind it (bnb.dispatch, bnb.dispatch_trace), with no
device but the CPU: what serves each key is read from the dispatcher, and --trace shows the kernel that ran. The
same on the test device, with each kind of backend, is in test_device_backends.py."""

import re
import subprocess
import sys

import pytest
import torch

import bnb
from bnb import dispatch
from bnb.dispatch_trace import KernelTrace, trace


def run_bnb(*args):
    return subprocess.run([sys.executable, "-m", "bnb", "dispatch", *args], capture_output=True, text=True)


def bnb_dispatch(capsys, *args) -> str:
    """python -m bnb dispatch ARGS, in this process (the command's code; run_bnb runs it as users do)."""
    from bnb.__main__ import main
    assert main(["dispatch", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("entry, kind", [
    ("registered at bnb/ops/blockwise4/cpu.cc:55 [kernel]", "bnb"),
    ("registered at /src/bnb/ops/blockwise8/cuda.cc:9 [kernel]", "bnb"),
    ("registered at /x/site-packages/bnb/reference/__init__.py:27 [default backend kernel]", "reference"),
    ("registered at /x/site-packages/torch/library.py:1003 [autograd kernel]", "formula"),
    ("registered at /x/site-packages/torch/library.py:931 [kernel]", "python"),
    ("registered at /home/me/kernels.py:12 [kernel]", "python"),
    ("registered at vendor/kernels/blockwise4.cc:46 [kernel]", "library"),
    ("fallthrough registered at /x/site-packages/bnb/reference/__init__.py:30 [autograd kernel]", "fallthrough"),
    ("registered at vendor/fallback.cc:58 [backend fallback]", "fallback"),
    ("registered at /__w/pytorch/pytorch/build/aten/src/ATen/RegisterCPU_1.cpp:2401 [kernel]", "torch"),
    (None, "nothing"),
])
def test_an_entry_is_classified_by_where_it_was_registered(entry, kind):
    assert dispatch.classify(entry).kind == kind


def test_the_ops_are_the_dispatchers_own():
    assert dispatch.op_names() == sorted(n.removeprefix("bnb::") for n in torch._C._dispatch_get_all_op_names()
                                         if n.startswith("bnb::"))
    assert "gemv_4bit.out" in dispatch.op_names()
    assert dispatch.resolve("gemv_4bit") == ["gemv_4bit", "gemv_4bit.out"]
    assert dispatch.resolve("bnb::gemv_4bit.out") == ["gemv_4bit.out"]
    with pytest.raises(ValueError, match="no bnb op 'gemv'; the dispatcher has: dequantize_4bit, "):
        dispatch.resolve("gemv")


@pytest.mark.parametrize("name", dispatch.op_names())
def test_each_key_shows_bnbs_kernels_the_reference_and_the_autograd_rule(name):
    q = f"bnb::{name}"
    for key in ("CPU", "CUDA", "Meta"):
        s = dispatch.served(q, key)
        if key == "Meta" and bnb.reference.OPS[name].fake is not None:  # outputs sized by the data
            assert s.kind == "fake" and re.search(r"bnb/reference/__init__\.py:\d+$", s.where), (key, s)
            continue
        assert s.kind == "bnb" and re.search(rf"bnb/ops/\w+/{key.lower()}\.cc:\d+$", s.where), (key, s)
    for key in ("PrivateUse1", "CompositeExplicitAutograd"):  # a device without kernels of its own gets these
        s = dispatch.served(q, key)
        assert s.kind == "reference" and re.search(r"bnb/reference/__init__\.py:\d+$", s.where), (key, s)
    want = "formula" if bnb.reference.OPS[name].differentiable else "fallthrough"
    assert {dispatch.served(q, k).kind for k in ("AutogradCPU", "AutogradCUDA", "AutogradPrivateUse1")} == {want}


def test_a_python_kernel_registered_for_a_key_shows_there():
    lib = torch.library.Library("bnb", "IMPL")
    try:
        lib.impl("quantize_blockwise", lambda A, code, blocksize: None, "PrivateUse1")
        assert dispatch.served("bnb::quantize_blockwise", "PrivateUse1").kind == "python"
        assert dispatch.served("bnb::quantize_blockwise", "CompositeExplicitAutograd").kind == "reference"
    finally:
        lib._destroy()
    assert dispatch.served("bnb::quantize_blockwise", "PrivateUse1").kind == "reference"


def test_trace_shows_the_kernel_that_ran_and_what_it_called():
    args, kwargs = bnb.reference.OPS["gemv_4bit"].example(torch.device("cpu"))
    steps, result = trace(torch.ops.bnb.gemv_4bit.default, args, kwargs)
    assert torch.equal(result, torch.ops.bnb.gemv_4bit(*args, **kwargs))
    top = [(s.op, s.key, s.served.kind) for s in steps if s.depth == 0]
    assert top == [("bnb::gemv_4bit", "AutogradCPU", "formula"), ("bnb::gemv_4bit", "CPU", "bnb")]
    assert re.search(r"bnb/ops/blockwise4/cpu\.cc:\d+$", steps[1].served.where)
    # The C++ kernel's own calls, one level down: its output allocated on the CPU through BackendSelect.
    assert ("aten::empty.memory_format", "CPU", "BackendSelect -> CPU") in [(s.op, s.key, s.note) for s in steps
                                                                             if s.depth == 1]


def test_trace_of_the_reference_kernel_shows_its_aten_ops():
    # The reference kernel as a device without kernels of its own runs it: each aten op it calls is traced.
    A, code = torch.randn(300), torch.linspace(-1, 1, 256)
    mode = KernelTrace()
    with mode:
        bnb.reference.OPS["quantize_blockwise"].kernel(A, code, 64)
    ops = {(s.op, s.key) for s in mode.steps if s.depth == 0}
    assert {("aten::abs", "CPU"), ("aten::amax", "CPU"), ("aten::searchsorted.Tensor", "CPU")} <= ops, ops


def test_cli_overview_has_a_line_per_op_and_a_legend():
    run = run_bnb()  # as users run it: a fresh process, where nothing but bnb registered anything
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == [f"torch {torch.__version__}; PrivateUse1 is 'privateuseone'",
                         "installed backends (bnb.backends): none"]
    header = next(i for i, l in enumerate(lines) if l.startswith("op "))
    assert lines[header].split() == ["op", "CPU", "CUDA", "Meta", "PrivateUse1", "CEA", "AutogradCPU",
                                     "AutogradCUDA", "AutogradPrivateUse1"]
    rows = {l.split()[0]: l.split()[1:] for l in lines[header + 1:header + 1 + len(dispatch.op_names())]}
    assert sorted(rows) == dispatch.op_names()
    assert rows["gemv_4bit"] == ["bnb", "bnb", "bnb", "reference", "reference", "formula", "formula", "formula"]
    assert rows["quantize_4bit"][5:] == ["fallthrough"] * 3
    assert "  reference   bnb's reference kernel (pure torch)" in lines


def test_cli_one_op_shows_where_each_kernel_was_registered(capsys):
    out = bnb_dispatch(capsys, "dequantize_blockwise")
    assert "bnb::dequantize_blockwise\n" in out and "bnb::dequantize_blockwise.out\n" in out
    assert re.search(r"\n  CPU +bnb's C\+\+ kernel +bnb/ops/blockwise8/cpu\.cc:\d+\n", out)
    assert re.search(r"\n  PrivateUse1 +bnb's reference kernel \(pure torch\) +bnb/reference/__init__\.py:\d+\n", out)


def test_cli_trace_runs_the_example_and_shows_the_kernels(capsys):
    out = bnb_dispatch(capsys, "quantize_4bit", "--trace", "--device", "cpu")
    assert "bnb::quantize_4bit on cpu, its example (bfloat16[64, 96], 64, 'nf4', uint8):" in out
    assert re.search(r"\n  bnb::quantize_4bit +CPU +bnb +bnb/ops/blockwise4/cpu\.cc:\d+\n", out), out
    assert re.search(r"\n    aten::empty\.memory_format +CPU +torch .*BackendSelect -> CPU\n", out)
    # reshape's own view is one level deeper than --depth's default shows
    assert "      aten::view " not in out and "\n  ... and 1 call deeper (--depth 2 or more shows them)" in out, out
    deeper = bnb_dispatch(capsys, "quantize_4bit", "--trace", "--device", "cpu", "--depth", "2")
    assert re.search(r"\n      aten::view +CPU +torch ", deeper) and "deeper" not in deeper, deeper


def test_cli_names_an_unknown_op_in_one_line():
    run = run_bnb("gemv")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("bnb: no bnb op 'gemv'; the dispatcher has: dequantize_4bit,"), run.stderr


def test_trace_goes_on_through_numbers_passed_as_tensors():
    # bitwise_and.Scalar's kernel calls bitwise_and.Tensor with a wrapped number, which reaches Python as an int.
    b = torch.arange(200, dtype=torch.uint8)
    x = torch.arange(6, dtype=torch.float64) / 3
    mode = KernelTrace()
    with mode:
        got = [b & 0xF, torch.arange(4) * 0.1, x * 0.1]
    assert [(s.op, s.note) for s in mode.steps if s.op == "aten::bitwise_and.Tensor"] == [
        ("aten::bitwise_and.Tensor", "a number passed as a 0-dim tensor")]
    for g, w in zip(got, [b & 0xF, torch.arange(4) * 0.1, x * 0.1]):  # dtypes and values as without the trace
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_trace_goes_on_through_detach():
    # With a mode on, torch's detach calls aten::detach through Python from inside the detach kernel itself.
    x = torch.randn(3)
    mode = KernelTrace()
    with mode:
        y = torch.nn.Parameter(x).detach()
    assert torch.equal(y, x) and [s.op for s in mode.steps] == ["aten::detach"]  # once: the re-entry is no call
