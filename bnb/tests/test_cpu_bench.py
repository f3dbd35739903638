"""The CPU benchmarks (tools/bench) run end to end at small sizes and print every row: a benchmark that breaks
should fail here, not on the day its figures are wanted."""

import re

import pytest
import torch

import bnb.config
import cpu_blockwise4
import cpu_blockwise8
import cpu_decode
import cpu_gemv4
import cpu_int8
import cpu_optim
import timing


def rows(text: str) -> dict:
    """case name -> (ms, GB/s, % of copy) of each table row in a benchmark's output."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^(.+?)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+)%$", line)
        if m:
            found[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)), int(m.group(4)))
    return found


def assert_timed(found: dict, names) -> None:
    for name in names:
        assert name in found, f"row {name!r} missing from {sorted(found)}"
        ms, gbs, _ = found[name]
        assert ms > 0 and gbs > 0, (name, found[name])


def test_blockwise8_bench_prints_every_row(capsys):
    cpu_blockwise8.main(["--elements", str(1 << 16), "--repeat", "1"])
    out = capsys.readouterr().out
    found = rows(out)
    for dtype in ("float32", "bfloat16"):
        assert_timed(found, [f"copy {dtype}", f"quantize_blockwise_into {dtype}", f"dequantize_blockwise.out {dtype}"])
        assert found[f"copy {dtype}"][2] == 100
    assert_timed(found, ["quantize_blockwise, new output"])
    assert out.count("thread scaling:") == 2


def test_optim_bench_prints_every_row(capsys):
    cpu_optim.main(["--elements", str(1 << 16), "--repeat", "1"])
    out = capsys.readouterr().out
    names = ["copy float32 (the parameter)", "torch AdamW fused", "torch AdamW foreach",
             "bnb AdamW 32-bit (the update op)", "bnb AdamW 8-bit (the update op)"]
    assert_timed(rows(out), names)
    ratios = re.findall(r"^  (.+?)\s+(\d+\.\d+)x$", out, re.M)
    assert set(names[2:]) <= {name for name, _ in ratios} and all(float(r) > 0 for _, r in ratios)


def test_blockwise4_bench_prints_every_row(capsys):
    cpu_blockwise4.main(["--elements", str(1 << 16), "--repeat", "1", "--gemv", "64x128"])
    out = capsys.readouterr().out
    found = rows(out)
    for dtype in ("float32", "bfloat16"):
        assert_timed(found, [f"copy {dtype}", f"quantize_4bit_into {dtype}", "quantize_4bit, new output",
                             f"dequantize_4bit {dtype}"])
    gemv = [line for line in out.splitlines() if line.startswith("64x128 ")]
    assert len(gemv) == 2, out
    for line in gemv:
        assert all(float(us) > 0 for us in line.split()[-3:]), line
    latency = re.findall(r"^(float32|bfloat16), (output cache|no cache, huge pages|no cache, 4 KB pages)"
                         r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert len(latency) == 6, out
    for *_, first, p50, p99, worst in latency:
        assert 0 < float(p50) <= float(p99) <= float(worst) and float(first) <= float(worst)
    assert bnb.config.get("cpu.huge_pages") is True  # the table puts the knobs back
    assert bnb.config.get("cpu.output_cache_mb") == 512


def test_gemv4_bench_prints_every_row(capsys):
    cpu_gemv4.main(["--shapes", "64x256", "--threads", "1", "--repeat", "1", "--no-layer", "--batches", "3"])
    out = capsys.readouterr().out
    batch = [line.split() for line in out.splitlines() if line.startswith("batch 3 ")]
    assert {(cells[2], cells[3]) for cells in batch} >= {("bfloat16", "bnb"), ("float32", "bnb")}, out
    assert all(float(cells[-1]) > 0 for cells in batch), batch
    table = {}  # (A dtype, implementation) -> (us, % of limit)
    dtype = None
    for line in out.splitlines():
        m = re.match(r"^(?:64x256\s+(\w+))?\s+(\S.*?)\s+(\d+)\s+(\d+)%$", line)
        if m:
            dtype = m.group(1) or dtype
            table[(dtype, m.group(2))] = (int(m.group(3)), int(m.group(4)))
    for dt in ("bfloat16", "float32"):
        kernel = bnb._C.gemv4_kernel(dt, 256)
        for name in ("limit (copy, read only)", f"bnb ({kernel})", f"F.linear {dt}"):
            assert (dt, name) in table, (dt, name, sorted(table))
        assert table[(dt, "limit (copy, read only)")][1] == 100
        assert table[(dt, f"bnb ({kernel})")][0] > 0, table  # us; its % rounds to 0 at this size


def test_gemv4_bench_loop_mode(capsys):
    cpu_gemv4.main(["--shapes", "64x256", "--threads", "1", "--repeat", "1", "--no-layer", "--loop", "--loop-mb", "0",
                    "--dtypes", "bfloat16"])
    out = capsys.readouterr().out
    rows = {line[40:66].strip(): int(line[66:75]) for line in out.splitlines() if line.endswith("%")}
    assert "limit (copy, read only)" in rows and "bnb matmul_4bit (tiled)" in rows, out
    assert not any(line.startswith("batch") for line in out.splitlines()), out


def test_gemv4_bench_runs_the_ggml_peer(capsys, tmp_path):
    peer = tmp_path / "ggml_peer"
    peer.write_text("#!/bin/sh\necho \"ggml, $1 threads, $2 rounds\"\n")
    peer.chmod(0o755)
    args = ["--shapes", "64x256", "--threads", "1", "--repeat", "1", "--no-layer", "--loop", "--loop-mb", "0",
            "--dtypes", "bfloat16", "--ggml-rounds", "2"]
    cpu_gemv4.main(args + ["--ggml-peer", str(peer)])
    assert "ggml, 1 threads, 2 rounds" in capsys.readouterr().out
    cpu_gemv4.main(args + ["--ggml-peer", str(tmp_path / "missing")])  # says why, and the table still prints
    out = capsys.readouterr().out
    assert "did not run" in out and "bnb matmul_4bit (tiled)" in out, out


def test_int8_bench_prints_every_row(capsys):
    cpu_int8.main(["--shape", "96x200", "--batches", "1,5", "--linear-batches", "1,3", "--repeat", "1"])
    out = capsys.readouterr().out
    assert f"int8 product kernel {bnb._C.int8_gemm_kernel()}" in out
    product = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("M=")}
    assert sorted(product) == ["M=1", "M=5"], out
    for cells in product.values():  # us, TOP/s, _int_mm us, TOP/s (0.000 at this size), speedup
        assert len(cells) == 5 and all(float(cells[i].rstrip("x")) > 0 for i in (0, 2, 4)), cells
        assert float(cells[1]) >= 0 and float(cells[3]) >= 0, cells
    linear = [line.split()[2:] for line in out.splitlines() if line.startswith("batch ")]
    assert len(linear) == 2, out
    for cells in linear:  # thresholds 0 and 6, bf16 and fp32 F.linear, the weight read
        assert len(cells) == 5 and all(float(c) >= 0 for c in cells), cells
    assert out.count("thread scaling:") == 2


KNOBS = ("cpu.threads", "cpu.grain_elements")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run without a GPU")
def test_gpu_benchmarks_say_they_skip_without_a_gpu(capsys):
    # tools/gpu/build.sh bench runs them after the CPU ones: without a GPU they must not fail the stage.
    import gpu_blockwise4
    import gpu_blockwise8
    import gpu_jit
    import gpu_int8
    import gpu_optim
    gpu_blockwise8.main()
    gpu_blockwise4.main()
    gpu_jit.main()
    gpu_optim.main([])
    gpu_int8.main()
    out = capsys.readouterr().out
    assert "no CUDA device: the GPU 8-bit benchmark is skipped" in out
    assert "no CUDA device: the GPU 4-bit benchmark is skipped" in out
    assert "no CUDA device: the GPU JIT benchmark is skipped" in out
    assert "no CUDA device: the GPU optimizer benchmark is skipped" in out
    assert "no CUDA device: the GPU int8 benchmark is skipped" in out


def test_thread_scaling_line_leaves_the_config_as_it_was():
    before = [(bnb.config.get(n), bnb.config.source(n)) for n in KNOBS]
    line = timing.thread_scaling_line(rounds=1)
    if torch.get_num_threads() < 2:
        assert "nothing to compare" in line
    else:
        ratio = float(re.search(r"in cache (\d+\.\d+)x as fast", line).group(1))
        # Any finite ratio: 0.00 when two threads on a core another process keeps busy stall each other, several
        # times the thread count when the one-thread run was the one stalled (seen under a parallel test run).
        assert 0 <= ratio < 100, line
    assert [(bnb.config.get(n), bnb.config.source(n)) for n in KNOBS] == before


def test_decode_bench_prints_its_rows(capsys):
    pytest.importorskip("transformers", reason="transformers is not installed (tools/requirements-hf.txt)")
    pytest.importorskip("accelerate", reason="accelerate is not installed (tools/requirements-hf.txt)")
    cpu_decode.main(["--hidden", "128", "--layers", "1", "--vocab", "256", "--tokens", "2", "--rounds", "1"])
    out = capsys.readouterr().out
    for name in ("bf16, not quantized", "bnb NF4 (companion package)"):
        line = next((row for row in out.splitlines() if row.startswith(name)), None)
        assert line is not None and "failed" not in line, out
        ms_per_token, prefill = (float(v) for v in line[len(name):].split()[:2])
        assert prefill > 0 and abs(ms_per_token) < 1e4, line  # a step of a tiny model may time within noise of 0
        assert "+bnb" in line  # the child ran on the companion, not on a bitsandbytes found elsewhere
    assert "bitsandbytes NF4" not in out  # no --peer-path: no peer row
