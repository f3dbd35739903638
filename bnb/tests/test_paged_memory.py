"""bnb.functional's paged tensors (bnb.paged_memory): get_paged, prefetch_tensor, GlobalPageManager, fill,
elementwise_func, _mul. On the CPU a paged tensor is ordinary memory; the CUDA cases (managed memory, prefetches to
the GPU and to host memory) run where a GPU is."""

import gc
import warnings

import pytest
import torch

import bnb
import bnb.functional as F
from bnb import paged_memory

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("shape, want", [((3, 4), (3, 4)), (((3, 4),), (3, 4)), ((torch.Size([2, 0, 5]),), (2, 0, 5)),
                                         ((), ()), ((7,), (7,))])
def test_get_paged_on_the_cpu_is_ordinary_memory_marked_paged(shape, want):
    t = F.get_paged(*shape, dtype=torch.bfloat16, device="cpu")
    assert t.shape == want and t.dtype == torch.bfloat16 and t.device.type == "cpu"
    assert t.is_paged is True and t.page_deviceid is None
    t.fill_(1.5)  # writable, all of it
    assert t.sum().item() == 1.5 * t.numel()
    F.prefetch_tensor(t)  # nothing to move: no error
    F.prefetch_tensor(t, to_cpu=True)


@pytest.mark.parametrize("shape, error, match", [
    ((-1, 2), ValueError, r"get_paged: shape \(-1, 2\) must be non-negative ints; got -1"),
    ((2.0,), TypeError, r"get_paged: shape \(2\.0,\) must be non-negative ints; got 2\.0"),
    ((True,), TypeError, r"get_paged: shape \(True,\) must be non-negative ints; got True"),
])
def test_get_paged_refuses_a_bad_shape_naming_it(shape, error, match):
    with pytest.raises(error, match=match):
        F.get_paged(*shape, device="cpu")


def test_get_paged_refuses_a_bad_dtype_and_a_missing_gpu():
    with pytest.raises(TypeError, match=r"get_paged: dtype must be a torch\.dtype; got 'float32'"):
        F.get_paged(3, dtype="float32", device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"get_paged: device cuda:0 is not available .* device='cpu'"):
            F.get_paged(3)  # bitsandbytes' default device


def test_fill_sets_every_element_and_refuses_a_value_the_dtype_cannot_hold():
    a = F.get_paged(5, 3, device="cpu")
    F.fill(a, -2.25)
    assert torch.equal(a, torch.full((5, 3), -2.25))
    u = F.get_paged(10, dtype=torch.uint8, device="cpu")
    F.fill(u, 255)
    assert torch.equal(u, torch.full((10,), 255, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"fill: value 300 does not fit A's dtype torch\.uint8"):
        F.fill(u, 300)  # bitsandbytes' c_uint8 would store 44
    assert torch.equal(u, torch.full((10,), 255, dtype=torch.uint8))  # untouched
    plain = torch.zeros(4, dtype=torch.float16)  # not paged: fill works on any tensor, as bitsandbytes'
    F.fill(plain, 0.5)
    assert torch.equal(plain, torch.full((4,), 0.5, dtype=torch.float16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8])
def test_arange_writes_each_elements_index_in_a_order(dtype):
    a = F.get_paged(6, 7, dtype=dtype, device="cpu")
    F.elementwise_func("arange", a, None, 0)
    assert torch.equal(a, torch.tensor([[7 * r + c for c in range(7)] for r in range(6)], dtype=dtype))
    t = F.get_paged(4, 3, device="cpu").t()  # a transposed view: its own element order
    F.elementwise_func("arange", t, None, 0)
    assert torch.equal(t, torch.tensor([[0.0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]))


def test_arange_refuses_indices_the_dtype_cannot_hold():
    u = F.get_paged(257, dtype=torch.uint8, device="cpu")
    F.fill(u, 9)
    with pytest.raises(ValueError, match=r"arange: A's 257 indices do not fit its dtype torch\.uint8 \(largest 255\)"):
        F.elementwise_func("arange", u, None, 0)
    assert (u == 9).all()


def test_mul_multiplies_element_by_element_in_a_order():
    a = F.get_paged(2, 3, device="cpu")
    a.copy_(torch.tensor([[1.0, 2, 3], [4, 5, 6]]))
    F._mul(a, torch.tensor([10.0, 20, 30, 40, 50, 60]))  # flat B: matched by element order
    assert torch.equal(a, torch.tensor([[10.0, 40, 90], [160, 250, 360]]))
    F.elementwise_func("_mul", a, torch.full((3, 2), 0.5), 0)
    assert torch.equal(a, torch.tensor([[5.0, 20, 45], [80, 125, 180]]))


def test_elementwise_func_names_what_is_wrong_and_leaves_a_untouched():
    a = F.get_paged(2, 3, device="cpu")
    F.fill(a, 1.0)
    with pytest.raises(NotImplementedError, match=r"func_name 'exp' is not one of \['_mul', 'arange', 'fill'\]"):
        F.elementwise_func("exp", a, None, 0)
    with pytest.raises(TypeError, match=r"_mul needs a tensor B; got NoneType"):
        F.elementwise_func("_mul", a, None, 0)
    with pytest.raises(ValueError, match=r"_mul: B \(\(5,\), cpu\) must have as many elements as A \(\(2, 3\), cpu\)"):
        F._mul(a, torch.ones(5))
    with pytest.raises(TypeError, match=r"A must be a tensor; got list"):
        F.elementwise_func("fill", [1.0], None, 0)
    assert torch.equal(a, torch.ones(2, 3))


def test_prefetch_tensor_refuses_what_get_paged_did_not_make():
    with pytest.raises(ValueError, match=r"prefetch_tensor: A \(\(2,\), torch\.float32, cpu\) is not a paged tensor"):
        F.prefetch_tensor(torch.zeros(2))
    with pytest.raises(TypeError, match=r"prefetch_tensor: A must be a tensor; got int"):
        F.prefetch_tensor(3)


def test_global_page_manager_is_bitsandbytes_singleton_and_prefetches_last_added_first(monkeypatch):
    with pytest.raises(RuntimeError, match="Call get_instance"):
        F.GlobalPageManager()
    mng = F.GlobalPageManager.get_instance()
    assert F.GlobalPageManager.get_instance() is mng
    assert bnb.functional.GlobalPageManager is paged_memory.GlobalPageManager
    monkeypatch.setattr(mng, "paged_tensors", [])
    monkeypatch.setattr(mng, "_registered", [])
    user = [F.get_paged(n, device="cpu") for n in (1, 2)]
    mng.paged_tensors.extend(user)
    state = [F.get_paged(n, device="cpu") for n in (3, 4, 5)]
    for t in state:
        paged_memory.register(t)  # as a paged optimizer registers its state: weakly
    del state[1]
    gc.collect()
    calls = []
    monkeypatch.setattr(paged_memory, "prefetch_tensor", lambda t, to_cpu: calls.append((t.numel(), to_cpu)))
    mng.prefetch_all(to_cpu=True)
    assert calls == [(5, True), (3, True), (2, True), (1, True)]  # the freed state gone, the user's list kept
    assert len(mng._registered) == 2


def test_within_live_finds_the_allocation_a_range_lies_in(monkeypatch):
    """The lookup a prefetch makes (no GPU needed: the live allocations are stubbed)."""
    monkeypatch.setattr(paged_memory, "_live", {1000: (0, 100), 5000: (1, 64)})
    assert paged_memory._within_live(1000, 100) == (0, 1000, 100)
    assert paged_memory._within_live(1040, 60) == (0, 1040, 60)  # a part of it
    assert paged_memory._within_live(1040, 61) is None  # runs past its end
    assert paged_memory._within_live(5000, 8) == (1, 5000, 8)
    assert paged_memory._within_live(990, 20) is None and paged_memory._within_live(2000, 4) is None


def test_span_bytes_of_views():
    t = torch.zeros(10, 20)
    assert paged_memory._span_bytes(t) == 800
    assert paged_memory._span_bytes(t[2:, 5:]) == ((7 * 20 + 14) + 1) * 4
    assert paged_memory._span_bytes(t.t()) == 800
    assert paged_memory._span_bytes(t[:, 3]) == (9 * 20 + 1) * 4


def test_functional_has_the_names_bitsandbytes_has():
    from bnb import _missing
    for name in ("get_paged", "prefetch_tensor", "GlobalPageManager", "fill", "elementwise_func", "_mul",
                 "FIRST_CUDA_DEVICE"):
        assert getattr(F, name) is getattr(paged_memory, name)
        assert name not in _missing.MISSING["bnb.functional"]
    assert F.FIRST_CUDA_DEVICE == torch.device("cuda", 0)


@cuda
def test_cuda_paged_tensor_is_managed_memory_prefetched_both_ways():
    a = F.get_paged(1000, 300)  # bitsandbytes' default device, cuda:0
    assert a.device == torch.device("cuda", 0) and a.is_paged and a.page_deviceid == 0
    found = paged_memory.allocation_of(a)
    assert found == (0, a.data_ptr(), a.numel() * 4)
    F.fill(a, 2.0)
    F.prefetch_tensor(a, to_cpu=True)
    torch.cuda.synchronize()
    assert torch.equal(a.cpu(), torch.full((1000, 300), 2.0))
    F.prefetch_tensor(a)
    F.elementwise_func("arange", a, None, 0)
    assert torch.equal(a.cpu(), torch.arange(300_000, dtype=torch.float32).view(1000, 300))
    copy = a.clone()
    copy.is_paged = True
    assert paged_memory.allocation_of(copy) is None  # ordinary memory: its prefetch does nothing
    F.prefetch_tensor(copy)
    live = len(paged_memory._live)
    del a, found
    gc.collect()
    assert len(paged_memory._live) == live - 1


@cuda
def test_cuda_paged_optimizer_state_moves_with_prefetch_all():
    p = torch.nn.Parameter(torch.randn(400, 260, device="cuda"))
    opt = bnb.optim.PagedAdamW8bit([p])
    p.grad = torch.randn_like(p)
    opt.step()
    state = opt.state[p]
    assert state["state1"].is_paged and paged_memory.allocation_of(state["state1"]) is not None
    F.GlobalPageManager.get_instance().prefetch_all(to_cpu=True)
    torch.cuda.synchronize()
    before = p.detach().clone()
    opt.step()  # the state comes back when the update touches it
    assert not torch.equal(before, p)


@cuda
def test_cuda_without_managed_memory_get_paged_warns_once_and_gives_device_memory(monkeypatch):
    def no_managed(*a):
        raise ValueError("CUDA device 0 has no concurrent managed access")
    monkeypatch.setattr(paged_memory, "_managed_unavailable", set())
    monkeypatch.setattr(paged_memory, "managed_empty", no_managed)
    with pytest.warns(UserWarning, match=r"get_paged: no managed memory on cuda:0 \(CUDA device 0 has no concurrent"):
        a = F.get_paged(10, device="cuda:0")
    assert a.device == torch.device("cuda", 0) and a.is_paged and paged_memory.allocation_of(a) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        F.get_paged(10, device="cuda:0")
    F.prefetch_tensor(a)  # nothing to move
