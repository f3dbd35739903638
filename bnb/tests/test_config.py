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


def test_odd_config_paths_are_passed_over_with_a_warning(clean_env, monkeypatch, capfd):
    (clean_env / "bnb.toml").mkdir()
    bnb.config.reload()
    err = capfd.readouterr().err
    assert f"config file {clean_env}/bnb.toml is a directory, not a regular file: it is not read" in err
    (clean_env / "bnb.toml").rmdir()
    os.mkfifo(clean_env / "fifo.toml")  # opening it would wait for a writer forever: it is opened non-blocking
    monkeypatch.setenv("BNB_CONFIG", str(clean_env / "fifo.toml"))
    bnb.config.reload()
    err = capfd.readouterr().err
    assert "fifo.toml is a FIFO, not a regular file: it is not read (though BNB_CONFIG names it" in err
    monkeypatch.setenv("BNB_CONFIG", str(clean_env / "missing.toml"))  # a typo in the name stays an error
    with pytest.raises(ValueError, match=r"BNB_CONFIG names .*missing\.toml, which does not exist"):
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
    user = clean_env / "xdg" / "bnb" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[cuda]\nnvrtc_path = "/opt/nv/libnvrtc.so"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    code = ("import os, bnb; print(bnb.config.get('cuda.nvrtc_path'), bnb.config.source('cuda.nvrtc_path'), "
            "'BNB_CUDA_NVRTC_PATH' in os.environ)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=clean_env).stdout.split()
    assert out == ["/opt/nv/libnvrtc.so", f"{user}:2", "False"]


def test_a_project_file_cannot_name_the_library_to_load(clean_env):
    # Whoever can write the working directory would choose the code every bnb process there runs.
    (clean_env / "bnb.toml").write_text('[cpu]\nthreads = 2\n[cuda]\nnvrtc_path = "/tmp/evil/libnvrtc.so"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    run = subprocess.run([sys.executable, "-m", "bnb", "config"], capture_output=True, text=True, env=env,
                         cwd=clean_env)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("bnb.toml:4: cuda.nvrtc_path is ignored: it names code to load") == 1, run.stderr
    rows = {line.split()[0]: line for line in run.stdout.splitlines()[1:]}
    nvrtc = rows["cuda.nvrtc_path"]
    assert '"" ' in nvrtc and "default (bnb.toml:4 ignored: a project file may not name code to load)" in nvrtc, nvrtc
    assert " 2 " in rows["cpu.threads"] and "bnb.toml:2" in rows["cpu.threads"]  # the rest of the file applies
    with pytest.raises(ValueError, match="cuda.nvrtc_path: expected an absolute path .*, got 'libnvrtc.so.12'"):
        bnb.config.set("cuda.nvrtc_path", "libnvrtc.so.12")


# Each case: what to put in the working directory d (x: the user's config home), the environment, and what stderr
# must say. CPU ops never read a cache or CUDA knob, so a broken one, or a config file that is no regular file of
# the user's alone, must not stop them: they run, and a warning says what was ignored. (Several in one process
# keep the test fast: any one of them failing the op fails the case.)
def _fifo_dir_loop(d, x):
    os.mkfifo(d / "bnb.toml")  # a blocking open would wait for a writer forever
    (x / "bnb" / "config.toml").mkdir(parents=True)
    os.symlink("loop.toml", d / "loop.toml")


def _group_writable(d, x):
    (d / "bnb.toml").write_text("[cpu]\nthreads = 1\n")
    (d / "bnb.toml").chmod(0o664)


def _unreadable(d, x):
    (d / "bnb.toml").write_text("")
    (d / "bnb.toml").chmod(0)


_PASSED_OVER = {
    "broken_cache_and_cuda_knobs": (
        lambda d, x: (d / "bnb.toml").write_text("[cache]\nenabled = 1\n"),
        {"BNB_CACHE_DIR": "rel/kernels", "BNB_CUDA_THREADS_PER_BLOCK": "48", "BNB_CUDA_NVRTC_PATH": "libnvrtc.so.12"},
        ["environment variable BNB_CACHE_DIR: cache.dir: expected an absolute path (~ is not expanded), got "
         "'rel/kernels'; cache.dir keeps its default",
         "cuda.threads_per_block: expected 0 or a power of two in [32, 1024], got 48",
         "cuda.nvrtc_path: expected an absolute path (~ is not expanded), got 'libnvrtc.so.12'",
         "bnb.toml:2:11: cache.enabled: expected a boolean, got 1; cache.enabled keeps its default"]),
    "cache_enabled_maybe": (None, {"BNB_CACHE_ENABLED": "maybe"},
                            ['BNB_CACHE_ENABLED: cache.enabled: expected true/false (or 1/0, yes/no), got "maybe"']),
    "fifo_directory_loop": (_fifo_dir_loop, {"BNB_CONFIG": "loop.toml"},
                            ["bnb.toml is a FIFO, not a regular file: it is not read",
                             "bnb/config.toml is a directory, not a regular file",
                             "loop.toml cannot be opened: Too many levels of symbolic links"]),
    "group_writable": (_group_writable, {}, ["bnb.toml is writable by group or others (mode 0664): it is not read"]),
}
if os.geteuid() != 0:  # root reads a file of mode 0000 all the same; the symlink loop above cannot be opened by any
    _PASSED_OVER["unreadable"] = (_unreadable, {}, ["bnb.toml cannot be opened: Permission denied"])
# A broken cpu setting, or a file that does not parse, still fails CPU ops with its message.
_FAILING = {
    "cpu_knob": (None, {"BNB_CPU_HUGE_PAGES": "maybe"},
                 ['environment variable BNB_CPU_HUGE_PAGES: cpu.huge_pages: expected true/false (or 1/0, yes/no), '
                  'got "maybe"']),
    "syntax_error": (lambda d, x: (d / "bnb.toml").write_text("[cpu]\nthreads = 1\n[cache\n"), {}, ["bnb.toml:3:"]),
}


def test_cpu_ops_run_under_broken_cache_settings_and_config_files_they_pass_over(tmp_path):
    code = ("import torch, bnb\n"
            "q, _ = torch.ops.bnb.quantize_blockwise(torch.randn(256), bnb.functional.create_dynamic_map(), 64)\n"
            "print('quantized', q.shape[0])")
    runs = {}
    try:
        for name, (prepare, env_vars, _) in {**_PASSED_OVER, **_FAILING}.items():  # all at once: each is a new process
            cwd, xdg = tmp_path / name, tmp_path / f"{name}-xdg"
            cwd.mkdir()
            xdg.mkdir()
            if prepare:
                prepare(cwd, xdg)
            env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
            env.update(XDG_CONFIG_HOME=str(xdg), **env_vars)
            runs[name] = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for name, run in runs.items():
            out, err = run.communicate(timeout=120)  # a config file that blocked its reader would end here
            wanted = {**_PASSED_OVER, **_FAILING}[name][2]
            if name in _FAILING:
                assert run.returncode != 0 and "quantized" not in out and wanted[0] in err, (name, out, err)
                continue
            assert run.returncode == 0 and out.strip() == "quantized 256", (name, out, err)
            for want in wanted:
                assert err.count(want) == 1, (name, want, err)  # warned, once
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()


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
