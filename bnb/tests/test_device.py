"""bnbdev, the PrivateUse1 test device (bnb/tests/device), on its own: its memory, device guard, minimal op set and
CPU fallback with its deny list. Nothing of bnb's runs here but the dispatch tables it reads."""

import re

import pytest
import torch

import bnbdev
from bnb import dispatch
from bnb.dispatch_trace import trace
from helpers import assert_same_bits

DEV = torch.device(bnbdev.NAME)

# The accelerator-integration guide's minimal set, and what nn.Module.to() needs: bnbdev's own kernels
# (aten_ops.cc); the rest falls back.
MINIMAL_OPS = ["empty.memory_format", "empty_strided", "as_strided", "view", "_reshape_alias", "resize_", "_copy_from",
               "_copy_from_and_resize", "_local_scalar_dense", "set_.source_Tensor", "set_.source_Storage",
               "set_.source_Storage_storage_offset", "_has_compatible_shallow_copy_type"]


def test_the_backend_is_named_and_is_torchs_accelerator():
    assert torch._C._get_privateuse1_backend_name() == "bnbdev"
    assert torch.accelerator.current_accelerator() == torch.device("bnbdev")
    assert torch.accelerator.device_count() == 2 and torch.bnbdev.is_available()
    x = torch.ones(3).bnbdev()  # the generated methods
    assert x.is_bnbdev and x.device == torch.device("bnbdev", 0)


@pytest.mark.parametrize("op", MINIMAL_OPS)
def test_each_minimal_op_is_served_by_the_devices_own_kernel(op):
    served = dispatch.classify(dispatch.computed_table(f"aten::{op}").get("PrivateUse1"))
    assert served.kind == "library" and re.search(r"bnb/tests/device/aten_ops\.cc:\d+$", served.where), served


def test_memory_comes_from_the_devices_allocator():
    before = bnbdev.memory_stats()
    x = torch.empty(1000, dtype=torch.float32, device=DEV)
    during = bnbdev.memory_stats()
    assert during["live_bytes"] - before["live_bytes"] == 4000
    assert during["allocations"] == before["allocations"] + 1
    assert x.data_ptr() % 64 == 0
    del x
    assert bnbdev.memory_stats()["live_bytes"] == before["live_bytes"]


def test_copies_to_from_and_within_the_device_keep_every_bit():
    x = torch.randn(7, 33, dtype=torch.bfloat16)
    d = x.to(DEV)
    assert d.device.type == "bnbdev"
    assert_same_bits(d.cpu(), x)
    assert_same_bits(d.t().contiguous().cpu(), x.t().contiguous())  # a strided device tensor, copied within
    e = torch.empty(33, 7, dtype=torch.float32, device=DEV)
    e.copy_(d.t())  # device -> device, converting
    assert_same_bits(e.cpu(), x.t().float())
    e.copy_(x.t())  # CPU -> device, strided source
    assert_same_bits(e.cpu(), x.t().float())


def test_views_reshapes_resize_set_and_item():
    d = torch.arange(12.0).to(DEV)
    assert d.view(3, 4)[1, 2].item() == 6.0  # view, as_strided (select), _local_scalar_dense
    assert d.view(3, 4).t().reshape(12)[1].item() == 4.0  # a copy through the fallback: not viewable
    assert_same_bits(torch.as_strided(d, (2, 2), (1, 3), 1).cpu(), torch.tensor([[1.0, 4.0], [2.0, 5.0]]))
    grown = torch.empty(2, device=DEV).resize_(3, 5)
    assert grown.shape == (3, 5) and grown.untyped_storage().nbytes() == 60
    s = torch.empty(0, device=DEV).set_(d)
    assert s.data_ptr() == d.data_ptr() and s.shape == (12,)
    s = torch.empty(0, device=DEV).set_(d.untyped_storage())
    assert s.shape == (12,) and s[11].item() == 11.0
    s = torch.empty(0, device=DEV).set_(d.untyped_storage(), 2, (2, 3), (3, 1))
    assert_same_bits(s.cpu(), torch.tensor([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]))


def test_a_cpu_parameter_takes_device_data_as_modules_move_it():
    p = torch.nn.Parameter(torch.zeros(3))
    assert torch._has_compatible_shallow_copy_type(p, torch.ones(3, device=DEV))
    p.data = torch.ones(3, device=DEV)  # what nn.Module.to() does; torch refuses it for an unknown PrivateUse1 type
    assert p.device.type == "bnbdev" and p.sum().item() == 3.0
    assert torch.nn.Linear(2, 2).to(DEV).weight.device.type == "bnbdev"


def test_the_device_guard_puts_memory_on_the_device_asked_for_and_restores_the_current_one():
    assert torch.accelerator.current_device_index() == 0
    x = torch.empty(4, device="bnbdev:1")
    assert x.device == torch.device("bnbdev", 1) and x.untyped_storage().device == torch.device("bnbdev", 1)
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    try:
        assert torch.empty(4, device=DEV).device == torch.device("bnbdev", 1)  # no index: the current device
        with pytest.raises(RuntimeError, match="bnbdev: no device 2; there are 2"):
            torch.accelerator.set_device_index(2)
    finally:
        torch.accelerator.set_device_index(0)


def test_ops_without_a_kernel_run_on_the_cpu_through_the_fallback():
    a, b = torch.randn(5, 6), torch.randn(6, 2)
    got = a.to(DEV) @ b.to(DEV)
    assert got.device.type == "bnbdev"
    assert_same_bits(got.cpu(), a @ b)
    # mm's structured kernel serves every backend and calls mm.out, which bnbdev has no kernel for.
    steps, _ = trace(torch.ops.aten.mm.default, (a.to(DEV), b.to(DEV)), {})
    fell_back = [i for i, s in enumerate(steps) if s.served.kind == "fallback"]
    assert [(steps[i].op, steps[i].key) for i in fell_back] == [("aten::mm.out", "PrivateUse1")], steps
    assert re.search(r"bnb/tests/device/fallback\.cc:\d+$", steps[fell_back[0]].served.where)
    # Inside, the arguments went to the CPU (the CPU kernel itself is a redispatch, which no mode sees).
    first_inside = steps[fell_back[0] + 1]
    assert first_inside.op == "aten::_to_cpu" and first_inside.depth == steps[fell_back[0]].depth + 1, steps


def test_denied_ops_fail_naming_the_op_instead_of_falling_back():
    with pytest.raises(NotImplementedError, match=r"bnbdev: aten::uniform_ has no bnbdev kernel and is on the deny "
                                                  r"list of bnbdev's CPU fallback"):
        torch.rand(3, device=DEV)
    x = torch.randn(10).to(DEV)
    torch.ops.bnbdev.deny_fallback("aten::abs")
    try:
        # "aten::abs" denies every overload; abs reaches the fallback as abs.out.
        with pytest.raises(NotImplementedError, match=r"bnbdev: aten::abs\.out has no bnbdev kernel"):
            x.abs()
    finally:
        torch.ops.bnbdev.deny_fallback("aten::abs", False)
    assert_same_bits(x.abs().cpu(), x.cpu().abs())
    with pytest.raises(RuntimeError, match="deny_fallback takes an aten op"):
        torch.ops.bnbdev.deny_fallback("abs")


def test_autograd_runs_on_the_device():
    a = torch.randn(4, 5, requires_grad=True)
    w = torch.randn(5, 3)
    wd = w.to(DEV).requires_grad_()
    (a.to(DEV) @ wd).square().sum().backward()
    wc = w.clone().requires_grad_()
    a2 = a.detach().clone().requires_grad_()
    (a2 @ wc).square().sum().backward()
    assert wd.grad.device.type == "bnbdev"
    assert_same_bits(wd.grad.cpu(), wc.grad)
    assert_same_bits(a.grad, a2.grad)
