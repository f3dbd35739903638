"""bnb.config from Python: layering through files and environment, run-time overrides, errors, the CLI."""

import os
import subprocess
import sys

import pytest

import bnb


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No user, project or explicit config and no BNB_* knob variables; restores everything afterwards."""
    for k in list(os.environ):
        if k.startswith("BNB_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    bnb.config.reset()
    bnb.config.reload()
    yield tmp_path
    monkeypatch.undo()
    bnb.config.reset()
    bnb.config.reload()


def test_layers(clean_env, monkeypatch):
    tmp = clean_env
    (tmp / "xdg" / "bnb").mkdir(parents=True)
    (tmp / "xdg" / "bnb" / "config.toml").write_text("[cpu]\nthreads = 1\ngrain_elements = 2048\n")
    bnb.config.reload()
    assert bnb.config.get("cpu.threads") == 1
    assert bnb.config.source("cpu.threads").endswith("xdg/bnb/config.toml:2")

    (tmp / "bnb.toml").write_text("[cpu]\nthreads = 2\n")
    bnb.config.reload()
    assert bnb.config.get("cpu.threads") == 2 and bnb.config.get("cpu.grain_elements") == 2048

    (tmp / "explicit.toml").write_text("[cpu]\nthreads = 3\n")
    monkeypatch.setenv("BNB_CONFIG", str(tmp / "explicit.toml"))
    bnb.config.reload()
    assert bnb.config.get("cpu.threads") == 3

    monkeypatch.setenv("BNB_CPU_THREADS", "4")
    bnb.config.reload()
    assert bnb.config.get("cpu.threads") == 4 and bnb.config.source("cpu.threads") == "env BNB_CPU_THREADS"

    bnb.config.set("cpu.threads", 5)
    assert bnb.config.get("cpu.threads") == 5 and bnb.config.source("cpu.threads") == "bnb.config.set"
    with bnb.config.override(cpu__threads=6):
        assert bnb.config.get("cpu.threads") == 6
    assert bnb.config.get("cpu.threads") == 5
    bnb.config.unset("cpu.threads")
    assert bnb.config.get("cpu.threads") == 4


def test_errors_name_file_line_and_key(clean_env):
    (clean_env / "bnb.toml").write_text("[cpu]\nthreads = 1\n\n[cache]\nenabeld = true\n")
    with pytest.raises(ValueError, match=r"bnb\.toml:5:1: unknown key 'cache\.enabeld'"):
        bnb.config.reload()
    (clean_env / "bnb.toml").write_text("[cpu]\nthreads = -3\n")
    with pytest.raises(ValueError, match=r"bnb\.toml:2:11: cpu\.threads: expected an integer in \[0, 4096\], got -3"):
        bnb.config.reload()


def test_set_checks_type_and_range(clean_env):
    with pytest.raises(ValueError, match="cpu.threads: expected an integer, got \"2\""):
        bnb.config.set("cpu.threads", "2")
    with pytest.raises(ValueError, match=r"expected an integer in \[1024"):
        bnb.config.set("cpu.grain_elements", 5)
    with pytest.raises(ValueError, match="cpu.isa: 'avx9' is not an instruction set"):
        bnb.config.set("cpu.isa", "avx9")
    with pytest.raises(KeyError, match="unknown config key 'cpu.speed'"):
        bnb.config.set("cpu.speed", 1)
    with pytest.raises(TypeError):
        bnb.config.set("cpu.threads", 1.5)
    with pytest.raises(ValueError, match="cuda.threads_per_block: expected 0 or a power of two in \\[32, 1024\\], got 48"):
        bnb.config.set("cuda.threads_per_block", 48)
    bnb.config.set("cuda.threads_per_block", 128)
    assert bnb.config.get("cuda.threads_per_block") == 128
    shaping = {e["name"] for e in bnb.config.effective() if e["shapes_code"]}
    assert shaping == {"cuda.threads_per_block"}  # the knobs that go into compiled-kernel keys


def test_bad_file_makes_ops_raise_not_crash(clean_env):
    (clean_env / "bnb.toml").write_text("[cpu]\nthreads = 'x'\n")
    with pytest.raises(ValueError):
        bnb.config.reload()
    # The failed reload kept the previous values, so ops still run.
    import torch
    q, absmax = torch.ops.bnb.quantize_blockwise(torch.randn(100), bnb.functional.create_dynamic_map(), 64)
    assert q.shape == (100,)


def test_cli_prints_every_knob_and_its_source(clean_env):
    env = dict(os.environ, BNB_CPU_THREADS="3")
    out = subprocess.run([sys.executable, "-m", "bnb", "config"], capture_output=True, text=True, check=True,
                         env=env, cwd=clean_env).stdout
    for e in bnb.config.effective():
        assert e["name"] in out
    line = next(l for l in out.splitlines() if l.startswith("cpu.threads"))
    assert " 3 " in line and "env BNB_CPU_THREADS" in line


def test_cli_reports_a_bad_file_without_a_traceback(clean_env):
    (clean_env / "bnb.toml").write_text("[cpu]\nthreads = 'x'\n")
    run = subprocess.run([sys.executable, "-m", "bnb", "config"], capture_output=True, text=True, cwd=clean_env,
                         env=dict(os.environ))
    assert run.returncode == 2
    assert "bnb.toml:2:11: cpu.threads: expected an integer, got 'x'" in run.stderr
    assert "Traceback" not in run.stderr


def test_odd_config_paths_are_errors_naming_them(clean_env, monkeypatch):
    (clean_env / "bnb.toml").mkdir()
    with pytest.raises(ValueError, match=r"config file bnb\.toml is not a regular file \(a directory\)"):
        bnb.config.reload()
    (clean_env / "bnb.toml").rmdir()
    os.mkfifo(clean_env / "bnb.toml")  # opening it would wait for a writer forever
    with pytest.raises(ValueError, match=r"config file bnb\.toml is not a regular file"):
        bnb.config.reload()
    (clean_env / "bnb.toml").unlink()
    monkeypatch.setenv("BNB_CONFIG", str(clean_env / "missing.toml"))
    with pytest.raises(ValueError, match=r"BNB_CONFIG names .*missing\.toml, which does not exist"):
        bnb.config.reload()
    monkeypatch.setenv("BNB_CONFIG", str(clean_env))
    with pytest.raises(ValueError, match=r"BNB_CONFIG: config file .* is not a regular file \(a directory\)"):
        bnb.config.reload()


def test_unknown_sections_are_errors_even_when_empty(clean_env):
    (clean_env / "bnb.toml").write_text("[cpu]\nthreads = 1\n\n[gpu]\n# threads = 2\n")
    with pytest.raises(ValueError, match=r"bnb\.toml:4:1: unknown section 'gpu'"):
        bnb.config.reload()


def test_set_names_the_knob_for_values_it_cannot_take(clean_env):
    with pytest.raises(ValueError, match=r"cpu\.threads: expected a 64-bit integer, got 9223372036854775808"):
        bnb.config.set("cpu.threads", 2**63)
    with pytest.raises(TypeError, match=r"cpu\.threads: values are int, bool or str, got 1\.5"):
        bnb.config.set("cpu.threads", 1.5)


def test_a_config_files_nvrtc_path_beats_the_detected_wheel(clean_env):
    # Importing bnb offers the nvidia-cuda-nvrtc wheel's library (where installed) below every config layer.
    (clean_env / "bnb.toml").write_text('[cuda]\nnvrtc_path = "/opt/nv/libnvrtc.so"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    code = ("import os, bnb; print(bnb.config.get('cuda.nvrtc_path'), bnb.config.source('cuda.nvrtc_path'), "
            "'BNB_CUDA_NVRTC_PATH' in os.environ)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=clean_env).stdout.split()
    assert out == ["/opt/nv/libnvrtc.so", "bnb.toml:2", "False"]


def test_bytes_that_are_not_utf8_neither_crash_nor_vanish(clean_env, monkeypatch):
    monkeypatch.setenv("BNB_CACHE_DIR", os.fsdecode(b"/tmp/bnb-\xff"))
    bnb.config.reload()
    assert os.fsencode(bnb.config.get("cache.dir")) == b"/tmp/bnb-\xff"  # as os.fsdecode gives it: round-trips
    bnb.config.set("cache.dir", bnb.config.get("cache.dir"))
    assert os.fsencode(bnb.config.get("cache.dir")) == b"/tmp/bnb-\xff"
    monkeypatch.setenv("BNB_CPU_ISA", os.fsdecode(b"avx\xff"))
    with pytest.raises(ValueError, match=r"cpu\.isa: 'avx\\xff' is not an instruction set"):
        bnb.config.reload()


def test_string_values_cannot_hold_nul(clean_env):
    with pytest.raises(ValueError, match="cache.dir: the value holds a NUL byte"):
        bnb.config.set("cache.dir", "/x\x00y")


def test_relative_xdg_config_home_is_ignored(clean_env, monkeypatch):
    (clean_env / "rel" / "bnb").mkdir(parents=True)
    (clean_env / "rel" / "bnb" / "config.toml").write_text("[cpu]\nthreads = 3\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", "rel")  # the XDG spec: relative values are invalid
    monkeypatch.setenv("HOME", str(clean_env / "home"))
    bnb.config.reload()
    assert bnb.config.source("cpu.threads") == "default"


def test_cli_warns_of_bnb_variables_that_name_no_knob(clean_env):
    env = dict(os.environ, BNB_CPU_THRAEDS="3")
    run = subprocess.run([sys.executable, "-m", "bnb", "config"], capture_output=True, text=True, env=env,
                         cwd=clean_env)
    assert run.returncode == 0
    assert run.stderr.count("BNB_CPU_THRAEDS is set but is no bnb knob's variable") == 1, run.stderr



def test_overrides_that_close_out_of_order_leave_nothing_behind(clean_env):
    a, b = bnb.config.override(cpu__threads=1), bnb.config.override(cpu__threads=2, cpu__grain_elements=4096)
    a.__enter__()
    b.__enter__()
    assert bnb.config.get("cpu.threads") == 2
    a.__exit__(None, None, None)  # the older block closes first (another thread's, or an asyncio task's)
    assert bnb.config.get("cpu.threads") == 2 and bnb.config.get("cpu.grain_elements") == 4096
    b.__exit__(None, None, None)
    assert bnb.config.get("cpu.threads") == 0 and bnb.config.source("cpu.threads") == "default"
    assert bnb.config.source("cpu.grain_elements") == "default"
    bnb.config.set("cpu.threads", 5)
    with bnb.config.override(cpu__threads=6):
        with pytest.raises(ValueError, match="grain_elements"):
            with bnb.config.override(cpu__threads=7, cpu__grain_elements=5):  # the bad value undoes threads=7
                pass
        assert bnb.config.get("cpu.threads") == 6
    assert bnb.config.get("cpu.threads") == 5 and bnb.config.source("cpu.threads") == "bnb.config.set"


def test_set_takes_numpy_scalars_tensors_and_paths(clean_env):
    import pathlib

    import numpy as np
    import torch
    bnb.config.set("cpu.threads", np.int64(3))
    assert bnb.config.get("cpu.threads") == 3
    bnb.config.set("cpu.threads", torch.tensor(2))
    assert bnb.config.get("cpu.threads") == 2
    bnb.config.set("cpu.huge_pages", np.bool_(False))
    assert bnb.config.get("cpu.huge_pages") is False
    bnb.config.set("cache.dir", pathlib.Path(clean_env / "kernels"))
    assert bnb.config.get("cache.dir") == str(clean_env / "kernels")
    with pytest.raises(TypeError, match=r"cpu\.threads: values are int, bool or str, got 2\.5"):
        bnb.config.set("cpu.threads", np.float64(2.5))


def test_a_config_file_whose_path_is_not_utf8_is_listed(clean_env, monkeypatch):
    d = os.fsencode(str(clean_env)) + b"/x\xff"
    os.makedirs(d + b"/bnb")
    with open(d + b"/bnb/config.toml", "w") as f:
        f.write("[cpu]\nthreads = 2\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", os.fsdecode(d))
    bnb.config.reload()
    row = next(e for e in bnb.config.effective() if e["name"] == "cpu.threads")
    assert row["value"] == 2 and row["source"] == os.fsdecode(d + b"/bnb/config.toml") + ":2"
    assert "cpu.threads" in bnb.config.format_table()
