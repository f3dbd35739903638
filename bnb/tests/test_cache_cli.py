"""`python -m bnb cache list | clear | warm`: what it removes, and how it fails (no GPU or compile needed)."""

import os
import subprocess
import sys

KEY = "0123456789abcdef" * 4


def run_cache(tmp_path, *args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    full.update({"BNB_CACHE_DIR": str(tmp_path / "kernels"), **env})
    return subprocess.run([sys.executable, "-m", "bnb", "cache", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=full)


def test_clear_removes_only_cache_files(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir(mode=0o700)
    ours = [KEY + ".bnbk", "." + KEY + ".tmp.12.34.5"]
    in_progress = "." + KEY + ".tmp.56.78.9"  # another process's store, just begun: clear leaves it
    theirs = ["notes.bnbk", ".bashrc.tmp.orig", KEY + ".bnbk.orig", "x" + KEY + ".bnbk"]
    for name in ours + theirs + [in_progress]:
        (d / name).write_text("x")
    os.utime(d / ours[1], (1e9, 1e9))  # a temp file from 2001: left by a killed process
    (d / ("sub" + KEY + ".bnbk")).mkdir()
    listed = run_cache(tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    assert ": 1 kernels, 0.0 MB; 2 temp files of unfinished writes" in listed.stdout, listed.stdout
    assert "notes.bnbk" not in listed.stdout
    cleared = run_cache(tmp_path, "clear")
    assert cleared.returncode == 0, cleared.stderr
    assert "removed 2 kernels" in cleared.stdout
    assert sorted(p.name for p in d.iterdir()) == sorted(theirs + ["sub" + KEY + ".bnbk", in_progress])


def test_warm_reports_a_bad_arch_once_and_warms_no_disabled_cache(tmp_path):
    bad = run_cache(tmp_path, "warm", "--arch", "sm_080")
    assert bad.returncode == 2
    assert bad.stderr.count("sm_080") == 1 and "Traceback" not in bad.stderr
    off = run_cache(tmp_path, "warm", "--arch", "sm_90", BNB_CACHE_ENABLED="false")
    assert off.returncode == 2 and "disabled" in off.stderr, off.stderr
    assert "kernels in" not in off.stdout


def test_a_wrong_nvrtc_path_is_an_error_said_once(tmp_path):
    typo = str(tmp_path / "no" / "libnvrtc.so.13")
    run = run_cache(tmp_path, "warm", "--arch", "sm_90", BNB_CUDA_NVRTC_PATH=typo)
    assert run.returncode == 2 and "kernels in" not in run.stdout
    assert run.stderr.count("could not be opened") == 1 and typo in run.stderr, run.stderr[:2000]
    assert "cuda.nvrtc_path knob (set by env BNB_CUDA_NVRTC_PATH)" in run.stderr and "bnb: bnb:" not in run.stderr


def test_cache_dir_must_be_absolute_and_a_relative_xdg_is_ignored(tmp_path):
    # The default directory exists and holds a kernel: a bad cache.dir must not list or clear it instead.
    default = tmp_path / "home" / ".cache" / "bnb" / "kernels"
    default.mkdir(parents=True)
    (default / (KEY + ".bnbk")).write_text("x")
    for action in ("list", "clear", "warm"):
        tilde = run_cache(tmp_path, action, BNB_CACHE_DIR="~/bnbx", HOME=str(tmp_path / "home"))
        assert tilde.returncode == 2 and "cache.dir: expected an absolute path (~ is not expanded), got '~/bnbx'" \
            in tilde.stderr, (action, tilde.stderr)
        assert "kernels" not in tilde.stdout, (action, tilde.stdout)
    assert (default / (KEY + ".bnbk")).exists()
    assert not (tmp_path / "~").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    env.update(XDG_CACHE_HOME="relxdg", HOME=str(tmp_path / "home"))
    out = subprocess.run([sys.executable, "-c", "import bnb; print(bnb.jit.cache_dir())"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, check=True).stdout.strip()
    assert out == str(tmp_path / "home" / ".cache" / "bnb" / "kernels")


def test_list_into_a_closed_pipe_ends_quietly(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir(mode=0o700)
    for i in range(3000):  # more than a pipe buffer holds
        (d / f"{i:064x}.bnbk").write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    env["BNB_CACHE_DIR"] = str(d)
    p = subprocess.Popen([sys.executable, "-m", "bnb", "cache", "list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert b"3000 kernels" in p.stdout.readline()
    p.stdout.close()  # as `| head -1` does
    err = p.stderr.read().decode()
    assert p.wait() == 1 and "Traceback" not in err, err
