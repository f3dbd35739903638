"""The CPU output cache (bnb/ops/common/output_cache.h, knob cpu.output_cache_mb): large outputs reuse the memory of
freed ones, hold exactly the values fresh outputs would, and stay ordinary tensors; the cap, the fit rule, the idle
release and the explicit release hand memory back."""

import os
import pickle
import time

import pytest
import torch

import bnb
from bnb import _C

MB = 1 << 20
N = 8 << 20  # float32 elements: a 32 MB output, above the cache's 8 MB floor


@pytest.fixture(autouse=True)
def fresh_cache():
    bnb.utils.empty_cpu_output_cache()
    with bnb.config.override(cpu__output_cache_mb=512):
        yield
    bnb.utils.empty_cpu_output_cache()


def quantized(n=N, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.ops.bnb.quantize_4bit(torch.randn(n, generator=g).to(dtype), 64, "nf4", torch.uint8)


def dequantize(packed, absmax, n=N, dtype=torch.float32):
    return torch.ops.bnb.dequantize_4bit(packed, absmax, 64, "nf4", [n], dtype)


def expected(packed, absmax, n=N, dtype=torch.float32):
    out = torch.empty(n, dtype=dtype)  # torch's own allocation
    torch.ops.bnb.dequantize_4bit.out(packed, absmax, 64, "nf4", [n], dtype, out=out)
    return out


def test_freed_output_is_reused_and_fully_overwritten():
    packed, absmax = quantized()
    first = dequantize(packed, absmax)
    ptr = first.data_ptr()
    first.fill_(float("nan"))  # what a stale block holds must not survive into the next output
    del first
    info = bnb.utils.cpu_output_cache_info()
    assert info["cached_blocks"] == 1 and info["cached_bytes"] == 32 * MB
    reuses = info["reuses"]
    packed2, absmax2 = quantized(seed=1)
    second = dequantize(packed2, absmax2)
    assert second.data_ptr() == ptr
    assert bnb.utils.cpu_output_cache_info()["reuses"] == reuses + 1
    assert torch.equal(second, expected(packed2, absmax2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reuse_across_dtypes_keeps_values(dtype):
    packed, absmax = quantized()
    out = dequantize(packed, absmax)
    ptr = out.data_ptr()
    del out
    packed, absmax = quantized(n=2 * N, dtype=dtype)
    out = dequantize(packed, absmax, 2 * N, dtype)  # 16-bit: the same 32 MB
    assert out.data_ptr() == ptr
    assert torch.equal(out, expected(packed, absmax, 2 * N, dtype))


def test_small_outputs_stay_with_torch():
    packed, absmax = quantized(n=1 << 20)  # 4 MB output
    mappings = bnb.utils.cpu_output_cache_info()["mappings"]
    del packed, absmax
    out = dequantize(*quantized(n=1 << 20), n=1 << 20)
    del out
    info = bnb.utils.cpu_output_cache_info()
    assert info["mappings"] == mappings and info["cached_blocks"] == 0


def test_cap_zero_releases_each_output():
    packed, absmax = quantized()
    with bnb.config.override(cpu__output_cache_mb=0):
        out = dequantize(packed, absmax)
        del out
        assert bnb.utils.cpu_output_cache_info()["cached_bytes"] == 0


def test_lowering_the_cap_trims_what_is_held():
    packed, absmax = quantized()
    a, b = dequantize(packed, absmax), dequantize(packed, absmax)
    del a, b
    assert bnb.utils.cpu_output_cache_info()["cached_bytes"] == 64 * MB
    with bnb.config.override(cpu__output_cache_mb=40):
        out = dequantize(packed, absmax)  # takes one block; the other goes under the 40 MB cap
        assert bnb.utils.cpu_output_cache_info()["cached_bytes"] == 0
        del out
        assert bnb.utils.cpu_output_cache_info()["cached_bytes"] == 32 * MB


def test_cap_evicts_the_oldest():
    packed, absmax = quantized()
    with bnb.config.override(cpu__output_cache_mb=48):
        a, b = dequantize(packed, absmax), dequantize(packed, absmax)
        b_ptr = b.data_ptr()
        del a, b  # a first: b's block is the newest and the one kept
        info = bnb.utils.cpu_output_cache_info()
        assert info["cached_blocks"] == 1 and info["cached_bytes"] == 32 * MB
        assert dequantize(packed, absmax).data_ptr() == b_ptr


def test_a_small_request_does_not_take_a_large_block():
    packed, absmax = quantized(n=4 * N)  # a 128 MB output
    big = dequantize(packed, absmax, 4 * N)
    del big
    mappings = bnb.utils.cpu_output_cache_info()["mappings"]
    small = dequantize(*quantized(n=N // 2), N // 2)  # 16 MB: more than a quarter below 128 MB, maps anew
    assert bnb.utils.cpu_output_cache_info()["mappings"] == mappings + 1
    assert bnb.utils.cpu_output_cache_info()["cached_bytes"] == 128 * MB
    del small


def test_release_hands_everything_back():
    packed, absmax = quantized()
    out = dequantize(packed, absmax)
    del out
    assert bnb.utils.cpu_output_cache_info()["cached_bytes"] > 0
    bnb.utils.empty_cpu_output_cache()
    assert bnb.utils.cpu_output_cache_info() | {"reuses": 0, "mappings": 0} == {
        "cached_bytes": 0, "cached_blocks": 0, "reuses": 0, "mappings": 0}


def test_idle_blocks_go_at_the_next_call():
    packed, absmax = quantized()
    out = dequantize(packed, absmax)
    del out
    assert bnb.utils.cpu_output_cache_info()["cached_blocks"] == 1
    time.sleep(10.5)
    mappings = bnb.utils.cpu_output_cache_info()["mappings"]
    out = dequantize(packed, absmax)  # the cached block fits, but it is stale: released, and fresh memory mapped
    info = bnb.utils.cpu_output_cache_info()
    assert info["cached_blocks"] == 0 and info["mappings"] == mappings + 1


def test_outputs_are_ordinary_tensors():
    packed, absmax = quantized()
    out = dequantize(packed, absmax)
    want = out.clone()
    out.resize_(3 * N)  # the storage grows through the cache's allocator, keeping its values
    assert torch.equal(out[:N], want)
    out.resize_(1 << 10)
    out.resize_(N)
    assert torch.equal(out[:1 << 10], want[:1 << 10])
    assert torch.equal(pickle.loads(pickle.dumps(out)), out)
    array = out.numpy()
    assert array.ctypes.data == out.data_ptr() and float(array[5]) == float(out[5])
    shared = out.clone()
    out.share_memory_()
    assert out.is_shared() and torch.equal(out, shared)


def test_knob_rejects_bad_values():
    with pytest.raises(Exception, match=r"cpu.output_cache_mb.*-1"):
        bnb.config.set("cpu.output_cache_mb", -1)
    with pytest.raises(Exception, match=r"cpu.output_cache_mb"):
        bnb.config.set("cpu.output_cache_mb", "lots")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_allocates():
    packed, absmax = quantized()
    out = dequantize(packed, absmax)
    del out
    pid = os.fork()
    if pid == 0:  # the child: its copy of the cache works, and its lock is free
        ok = False
        try:
            torch.set_num_threads(1)  # the parent's OpenMP workers do not exist here
            ok = torch.equal(dequantize(packed, absmax), expected(packed, absmax))
        finally:
            os._exit(0 if ok else 3)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail("the forked child hung allocating an output")


def held_after_freeing(make):
    """Bytes the cache gained when the output of make() was freed."""
    out = make()
    before = bnb.utils.cpu_output_cache_info()["cached_bytes"]
    del out
    return bnb.utils.cpu_output_cache_info()["cached_bytes"] - before


def test_products_and_int8_outputs_come_from_the_cache():
    W = torch.randn(4096, 4096) * 0.02
    packed, state = bnb.functional.quantize_4bit(W, blocksize=64, quant_type="nf4")
    A = torch.randn(1024, 4096)
    assert held_after_freeing(lambda: bnb.matmul_4bit(A, packed.t(), quant_state=state)) == 16 * MB
    with bnb.config.override(cpu__pack_4bit=False):
        assert held_after_freeing(lambda: bnb.matmul_4bit(A, packed.t(), quant_state=state)) == 16 * MB
    assert held_after_freeing(lambda: torch.ops.bnb.int8_vectorwise_quant(A.repeat(4, 1), 0.0)[0]) == 16 * MB
    codes, stats, _ = torch.ops.bnb.int8_vectorwise_quant(A, 0.0)
    wcodes, wstats, _ = torch.ops.bnb.int8_vectorwise_quant(W, 0.0)
    assert held_after_freeing(lambda: torch.ops.bnb.int8_linear_matmul(codes, wcodes)) == 16 * MB
    product = torch.ops.bnb.int8_linear_matmul(codes, wcodes)
    assert held_after_freeing(lambda: torch.ops.bnb.int8_mm_dequant(product, stats, wstats, torch.float32, None)) \
        == 16 * MB


def test_threads_allocating_and_freeing_at_once():
    """Four threads take and return blocks of several sizes at once (the ops run without the GIL); every output
    holds its own values, and the cache's books balance."""
    import threading
    sizes = [N // 2, N, N + (1 << 20), 2 * N]  # 16-64 MB outputs; N and N + 1M share blocks within the fit rule
    inputs = {n: quantized(n=n, seed=n) for n in sizes}
    wants = {n: expected(*inputs[n], n=n) for n in sizes}
    errors = []

    def work(seed):
        try:
            for i in range(12):
                n = sizes[(seed + i) % len(sizes)]
                out = dequantize(*inputs[n], n=n)
                if not torch.equal(out, wants[n]):
                    errors.append((seed, i, n))
                out.fill_(float("nan"))
                del out
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    info = bnb.utils.cpu_output_cache_info()
    assert info["reuses"] > 0 and 0 < info["cached_bytes"] <= 512 * MB
