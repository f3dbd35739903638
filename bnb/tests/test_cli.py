"""`python -m bnb demo` (the main job) and `python -m bnb config` as a user runs them: the demo's table holds
sane figures, bad arguments are one-line errors, and the config table's values are TOML a file can take back."""

import os
import re
import subprocess
import sys

import pytest

import bnb.config


def run_bnb(tmp_path, *args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "bnb", *args], capture_output=True, text=True, cwd=tmp_path,
                          env=full)


def test_demo_prints_a_row_per_shape_and_format_with_sane_figures(tmp_path):
    run = run_bnb(tmp_path, "demo", "--small", "--repeat", "1", "--dtype", "float32", "--blocksize", "256",
                  BNB_CPU_THREADS="1")
    assert run.returncode == 0, run.stderr
    assert "float32 weights" in run.stdout and "1 thread (cpu.threads = 1" in run.stdout
    rows = [l.split() for l in run.stdout.splitlines() if re.search(r"(8-bit bs256|nf4 bs64 nested)\s+\d", l)]
    assert len(rows) == 8, run.stdout
    for r in rows:
        before, after, ratio, abs_err, rel_err, q_gbs, dq_gbs = map(float, r[-7:])
        fmt = r[-9] + " " + r[-8]
        # 8-bit: one byte per weight plus a float32 absmax per 256; NF4: half a byte plus 8-bit nested absmax.
        want = 4 / (1 + 4 / 256) if fmt == "8-bit bs256" else 8 / (1 + 2 / 64 + 8 / (64 * 256))
        assert ratio == pytest.approx(want, abs=0.01), r
        assert before / after == pytest.approx(want, rel=0.02), r
        # Weights are randn * 0.02: the 8-bit bound of bitsandbytes' tests scaled to them, and NF4's error size.
        assert 0 < abs_err < (0.011 * 0.02 if fmt == "8-bit bs256" else 0.1 * 0.02), r
        assert 0 < rel_err < (0.018 if fmt == "8-bit bs256" else 0.3), r
        assert q_gbs > 0 and dq_gbs > 0


@pytest.mark.parametrize("args,bad", [(["--blocksize", "100"], "'100'"), (["--blocksize", "8192"], "'8192'"),
                                      (["--repeat", "0"], "'0'"), (["--repeat", "-2"], "'-2'")])
def test_demo_rejects_bad_arguments_in_one_line(tmp_path, args, bad):
    run = run_bnb(tmp_path, "demo", *args)
    assert run.returncode == 2 and bad in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_help_names_every_command(tmp_path):
    run = run_bnb(tmp_path, "--help")
    assert run.returncode == 0
    for command in ("demo", "config", "cache", "info", "dispatch", "quantize"):
        assert f"{command} (" in run.stdout.replace("\n", " "), run.stdout


def test_config_values_are_toml_that_a_file_takes_back(tmp_path, monkeypatch):
    overrides = {"BNB_CPU_ISA": "scalar", "BNB_CPU_HUGE_PAGES": "false", "BNB_CPU_THREADS": "3",
                 "BNB_CACHE_DIR": str(tmp_path / 'a "quoted" dir')}
    run = run_bnb(tmp_path, "config", **overrides)
    assert run.returncode == 0, run.stderr
    values = {}
    for line in run.stdout.splitlines()[1:]:
        name, rest = line.split(None, 1)
        m = re.match(r'("(?:[^"\\]|\\.)*"|\S+)', rest)
        values[name] = m.group(1)
    assert values["cpu.huge_pages"] == "false" and values["cpu.isa"] == '"scalar"' and values["cpu.threads"] == "3"
    sections = {}
    for name, value in values.items():
        section, key = name.split(".")
        sections.setdefault(section, []).append(f"{key} = {value}")
    (tmp_path / "bnb.toml").write_text("".join(f"[{s}]\n" + "\n".join(kv) + "\n" for s, kv in sections.items()))
    for k in [k for k in os.environ if k.startswith("BNB_")]:
        monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    try:
        bnb.config.reload()
        for name in values:
            assert "bnb.toml:" in bnb.config.source(name), (name, bnb.config.source(name))
        assert bnb.config.get("cpu.isa") == "scalar" and bnb.config.get("cpu.huge_pages") is False
        assert bnb.config.get("cache.dir") == str(tmp_path / 'a "quoted" dir')
    finally:
        monkeypatch.chdir("/")
        bnb.config.reload()


def test_a_misspelt_knob_variable_is_warned_of_at_import_and_others_are_not(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BNB_")}
    env.update(BNB_PYTHON="/usr/bin/python3", BNB_BASE_PYTHON="python3", BNB_CUDA_VERSION="124", BNB_CPU_THRED="2")
    run = subprocess.run([sys.executable, "-c", "import bnb"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0
    assert run.stderr.count("BNB_CPU_THRED is set but is no bnb knob's variable, so it is ignored") == 1, run.stderr
    for meant in ("BNB_PYTHON", "BNB_BASE_PYTHON", "BNB_CUDA_VERSION"):
        assert meant not in run.stderr
    # Read without the configuration: a broken config file does not hide the misspelling, nor fail the import.
    (tmp_path / "bnb.toml").write_text("[cpu]\nthreads = 'x'\n")
    run = subprocess.run([sys.executable, "-c", "import bnb"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0 and "BNB_CPU_THRED" in run.stderr, run.stderr
    config = run_bnb(tmp_path, "config", BNB_CPU_THRED="2")
    assert config.returncode == 2 and "BNB_CPU_THRED" in config.stderr and "bnb.toml:2" in config.stderr


def test_info_names_the_instruction_sets_run_here_and_those_this_cpu_lacks(tmp_path):
    run = run_bnb(tmp_path, "info")
    assert run.returncode == 0, run.stderr
    line = next(l for l in run.stdout.splitlines() if l.startswith("CPU instruction sets exercised here:"))
    here, lacking = line.split(":", 1)[1].split("; compiled in but not on this CPU (not exercised):")
    # Against the CPU's own flags: AVX-512 (F, BW, DQ, VL, CD: Highway's avx3) and AVX2 are exercised exactly when
    # /proc/cpuinfo lists them; each compiled target is on one side.
    flags = set(open("/proc/cpuinfo").read().split())
    has_avx3 = {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags
    assert ("avx3" in here.split()) == has_avx3 and ("avx3" in lacking.split()) == (not has_avx3)
    assert ("avx2" in here.split()) == ("avx2" in flags)
    assert sorted(here.split() + [x for x in lacking.split() if x != "none"]) == sorted(bnb._C.cpu_isas_compiled())
    assert "scalar" in here.split() or "emu128" in here.split()
    only = run_bnb(tmp_path, "info", "--isas")
    assert only.stdout.strip() == line
    cache = run_bnb(tmp_path, "info", BNB_CPU_OUTPUT_CACHE_MB="64")
    assert "CPU output cache: freed outputs of 8 MB and up kept for reuse, at most 64 MB" in cache.stdout, cache.stdout
    # gemv_4bit's kernels, against the same flags: the AVX-512 ones where avx3 runs, vdpbf16ps where AVX512-BF16 too.
    gemv = next(l for l in run.stdout.splitlines() if l.startswith("gemv_4bit"))
    bf16 = "avx512bf16" if has_avx3 and "avx512_bf16" in flags else "avx512" if has_avx3 else "highway_bf16"
    assert f"float32/float16 A {'avx512' if has_avx3 else 'highway'}, bfloat16 A {bf16} " in gemv, gemv
    small = next(l for l in run.stdout.splitlines() if l.startswith("gemm_4bit, 16 rows"))
    small_bf16 = bf16 if has_avx3 else "highway"  # the small-batch kernel multiplies exact code values there
    assert small.endswith(f"float32/float16 A {'avx512' if has_avx3 else 'highway'}, bfloat16 A {small_bf16}"), small
    # The tiled layout's: AMX tiles for bfloat16 where the CPU has AMX-BF16 too (Linux grants them to a process).
    tiled = next(l for l in run.stdout.splitlines() if l.startswith("tiled layout"))
    tiled_bf16 = "amx" if bf16 == "avx512bf16" and "amx_bf16" in flags else bf16 if has_avx3 else "none"
    assert f"float32/float16 A {'avx512' if has_avx3 else 'none'}, bfloat16 A {tiled_bf16} " in tiled, tiled
