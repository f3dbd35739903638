"""Backends that load themselves at `import bnb` (bnb.backends): an installed distribution's entry point in the group
"bnb.backends". Each case is a fresh Python process whose sys.path holds a fake installed distribution (a dist-info
folder with entry_points.txt) beside the backend's module."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest


def install(site, dist: str, entry_points: dict[str, str], modules: dict[str, str], group="bnb.backends") -> None:
    """A distribution `dist` as pip leaves one in site-packages: its modules and a dist-info with the entry points."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))


def run_python(site, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site)] + sys.path))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)


# A Python backend: a kernel for bnb::quantize_blockwise on PrivateUse1, and a note that load() ran.
GOOD = """
import torch
LOADS = []
_lib = None

def load():
    global _lib
    LOADS.append(1)
    _lib = torch.library.Library("bnb", "IMPL")
    _lib.impl("quantize_blockwise", lambda A, code, blocksize: (A, code), "PrivateUse1")
"""


def test_an_installed_backend_loads_at_import_bnb(tmp_path):
    install(tmp_path, "good-backend", {"good": "good_backend:load"}, {"good_backend": GOOD})
    run = run_python(tmp_path, """
        import json, bnb, good_backend, torch
        print(json.dumps({"loads": len(good_backend.LOADS),
                          "served": torch._C._dispatch_dump_table("bnb::quantize_blockwise"),
                          "backends": [(b.name, b.value, b.dist, b.error) for b in bnb.backends.backends()]}))
    """)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    got = json.loads(run.stdout)
    assert got["loads"] == 1
    assert re.search(r"\nPrivateUse1: registered at .*/good_backend\.py:\d+ \[kernel\]", got["served"]), got["served"]
    assert got["backends"] == [["good", "good_backend:load", "good-backend 1.0", None]]


def test_a_broken_backend_is_named_in_a_warning_and_import_bnb_still_works(tmp_path):
    install(tmp_path, "good-backend", {"good": "good_backend:load"}, {"good_backend": GOOD})
    install(tmp_path, "vendor-npu", {"npu": "vendor_npu:load"}, {"vendor_npu": """
        def load():
            raise OSError("libnpu_driver.so.3: cannot open shared object file")
    """})
    install(tmp_path, "gone", {"gone": "no_such_module:load"}, {})
    run = run_python(tmp_path, """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import bnb
        for w in caught:
            print(w.category.__name__, w.message)
        import torch
        q, _ = torch.ops.bnb.quantize_blockwise(torch.randn(256), bnb.functional.create_dynamic_map(), 64)
        print("cpu op ok", q.shape[0])
        try:
            bnb.backends.raise_if_failed()
        except RuntimeError as e:
            print("raised", e)
    """)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert ("BackendWarning bnb: backend 'npu' (vendor_npu:load, from vendor-npu 1.0) failed to load and is not "
            "used: OSError: libnpu_driver.so.3: cannot open shared object file (at ") in out, out
    assert ("BackendWarning bnb: backend 'gone' (no_such_module:load, from gone 1.0) failed to load and is not "
            "used: ModuleNotFoundError: No module named 'no_such_module'") in out, out
    assert out.count("BackendWarning") == 2  # the good one loaded
    assert "cpu op ok 256" in out
    assert "raised bnb: backend 'gone' (no_such_module:load, from gone 1.0) failed to load: " in out
    assert "; backend 'npu' (vendor_npu:load, from vendor-npu 1.0) failed to load: OSError" in out


def test_dispatch_lists_each_backend_and_how_its_load_went(tmp_path):
    install(tmp_path, "good-backend", {"good": "good_backend:load"}, {"good_backend": GOOD})
    install(tmp_path, "gone", {"gone": "no_such_module:load"}, {})
    run = run_python(tmp_path, "import sys, bnb.__main__; sys.exit(bnb.__main__.main(['dispatch', "
                               "'quantize_blockwise']))")
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[1]
    assert ("installed backends (bnb.backends): gone (no_such_module:load, gone 1.0): FAILED, ModuleNotFoundError: "
            "No module named 'no_such_module'") in first, first
    assert "; good (good_backend:load, good-backend 1.0): loaded" in first, first
    assert re.search(r"\n  PrivateUse1 +a Python kernel \(torch\.library\) ", run.stdout), run.stdout


@pytest.mark.parametrize("backend", ["kernels", "python_backend"])
def test_the_test_devices_backends_load_themselves(tmp_path, backend):
    # bnbdev's two backends as a vendor would ship them: after a plain `import bnb`, every op on the device is
    # served by the backend (the C++ library or the Python kernels), none by the reference.
    load = "bnbdev.kernels:load" if backend == "kernels" else "bnbdev.python_backend:register"
    install(tmp_path, "bnbdev-backend", {"bnbdev": load}, {})
    run = run_python(tmp_path, """
        import json, bnb, torch
        from bnb import dispatch
        print(json.dumps([torch._C._get_privateuse1_backend_name()] +
                         sorted({dispatch.served(f"bnb::{n}", "PrivateUse1").kind for n in dispatch.op_names()})))
    """)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert json.loads(run.stdout) == ["bnbdev", "library" if backend == "kernels" else "python"]


def test_dispatch_shows_an_autoloaded_device_backend_and_traces_on_its_device(tmp_path):
    install(tmp_path, "bnbdev-backend", {"bnbdev": "bnbdev.kernels:load"}, {})
    run = run_python(tmp_path, """
        from bnb.__main__ import main
        main(["dispatch"])
        main(["dispatch", "gemm_4bit", "--trace"])
    """)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].endswith("; PrivateUse1 is 'bnbdev'")
    assert lines[1] == "installed backends (bnb.backends): bnbdev (bnbdev.kernels:load, bnbdev-backend 1.0): loaded"
    assert lines[3].split()[:6] == ["op", "CPU", "CUDA", "Meta", "bnbdev", "CEA"]
    assert lines[4].split() == ["dequantize_4bit", "bnb", "bnb", "bnb", "library", "reference", "fallthrough",
                                "fallthrough", "fallthrough"]
    # --trace runs on the named device by default: gemm_4bit's library kernel, and the library's dequantize in it
    trace = run.stdout[run.stdout.index("bnb::gemm_4bit on bnbdev, its example ("):]
    assert re.search(r"\n  bnb::gemm_4bit +AutogradPrivateUse1 \(bnbdev\) +formula +torch/library\.py:\d+\n", trace)
    assert re.search(r"\n  bnb::gemm_4bit +PrivateUse1 \(bnbdev\) +library +bnb/tests/device/kernels/blockwise4\.cc:"
                     r"\d+\n", trace), trace
    assert re.search(r"\n    bnb::dequantize_4bit +PrivateUse1 \(bnbdev\) +library ", trace), trace


def test_a_device_alone_gets_the_reference_kernels_and_its_fallback_serves_their_aten_ops(tmp_path):
    # bnbdev as a torch device extension only (torch loads it at import torch), with no bnb backend.
    install(tmp_path, "bnbdev-device", {"bnbdev": "bnbdev:load"}, {}, group="torch.backends")
    run = run_python(tmp_path, "from bnb.__main__ import main; main(['dispatch', 'quantize_blockwise', '--trace'])")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    out = run.stdout
    assert out.splitlines()[1] == "installed backends (bnb.backends): none"
    assert re.search(r"\n  bnb::quantize_blockwise +PrivateUse1 \(bnbdev\) +reference +bnb/reference/__init__\.py:"
                     r"\d+\n", out), out
    assert re.search(r"\n    aten::searchsorted\.Tensor +PrivateUse1 \(bnbdev\) +fallback +bnb/tests/device/"
                     r"fallback\.cc:\d+\n", out), out
    assert re.search(r"\n  through the PrivateUse1 \(bnbdev\) fallback, \d+ calls: (aten::[\w.]+,\s+)*"
                     r"aten::searchsorted\.Tensor[,\n]", out), out

