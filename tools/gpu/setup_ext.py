"""Builds bnb._C with torch.utils.cpp_extension from tools/gpu/sources.txt, for machines without Bazel (the GPU
machine). The file list is Bazel's own (a test keeps sources.txt equal to //tools/gpu:bazel_sources).

  python3 tools/gpu/setup_ext.py build_ext --build-lib STAGE --build-temp TMP   (env BNB_DEPS_PREFIX: unpacked .debs)
"""

import os
import pathlib
import re
import subprocess
import sys

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREFIX = pathlib.Path(os.environ.get("BNB_DEPS_PREFIX", "/"))
LIBDIR = PREFIX / "usr/lib/x86_64-linux-gnu"
VERSION = next(l.split('"')[1] for l in (ROOT / "version.bzl").read_text().splitlines() if l.startswith("BNB_VERSION"))


def run(*cmd: str) -> str:
    return subprocess.run(list(cmd), check=True, capture_output=True, text=True).stdout


def generated(path: str, out_dir: pathlib.Path) -> pathlib.Path:
    """Makes a file Bazel generates, at out_dir / its repository path (out_dir is an include directory); only the
    generators this script knows are accepted."""
    out = out_dir / path
    out.parent.mkdir(parents=True, exist_ok=True)
    host = re.fullmatch(r"bnb/jit/(\w+)_host\.h", path)
    if path == "bnb/jit/kernels_embedded.cc":  # bnb/jit/BUILD.bazel's kernels_embedded genrule
        cuh = sorted(str(p) for p in (ROOT / "bnb/jit/kernels").glob("*.cuh"))
        out.write_text(run("sh", str(ROOT / "bnb/jit/embed_kernels.sh"), *cuh))
    elif host and (ROOT / f"bnb/jit/kernels/{host[1]}.cuh").exists():  # its *_host_h genrules
        out.write_text(run("sh", str(ROOT / "bnb/jit/host_header.sh"), str(ROOT / f"bnb/jit/kernels/{host[1]}.cuh")))
    else:
        sys.exit(f"setup_ext.py: don't know how to generate {path}; teach generated() its Bazel genrule")
    return out


def sources(out_dir: pathlib.Path) -> list[str]:
    """The .cc files to compile; generated headers are written under out_dir, an include directory."""
    srcs = []
    for line in (ROOT / "tools/gpu/sources.txt").read_text().split("\n"):
        if line.startswith("generated: "):
            out = generated(line.removeprefix("generated: "), out_dir)
            if out.suffix in (".cc", ".cpp"):
                srcs.append(str(out))
        elif line.endswith((".cc", ".cpp")):
            srcs.append(str(ROOT / line))
    return srcs


gen_dir = pathlib.Path(os.environ.get("BNB_GEN_DIR", "/tmp/bnb-gen"))
gen_dir.mkdir(parents=True, exist_ok=True)
absl = sorted(p.name[3:-3] for p in LIBDIR.glob("libabsl_*.so"))
setup(
    name="bnb",
    version=VERSION,
    ext_modules=[CppExtension(
        "bnb._C",
        sources(gen_dir),
        include_dirs=[str(ROOT), str(gen_dir), str(PREFIX / "usr/include")],
        library_dirs=[str(LIBDIR)],
        libraries=["hwy", "tomlplusplus", *absl, "dl"],
        runtime_library_dirs=[str(LIBDIR)],
        define_macros=[("HWY_SHARED_DEFINE", None), ("TOML_HEADER_ONLY", "0"), ("TOML_SHARED_LIB", "1"),
                       ("BNB_VERSION", f'"{VERSION}"')],
        # -ffp-contract=off and -falign-loops=64 as bnb/core/BUILD.bazel builds the kernels: g++ fuses a * b + c
        # into an FMA on AVX2/AVX-512 targets otherwise (C++ has no ISO mode that stops it), and the CPU optimizer
        # updates then differ from the references in the last bit (seen: 288 FMAs in optim_hwy.o without it, and
        # smoke.py --dry failing); loop alignment moves kernel timings.
        # No -std: BuildExtension adds the standard the installed torch's headers are written for when none is
        # given (C++20 in torch 2.13; torch 2.14's headers need it), where a pinned -std=c++17 would break them.
        # -g0: no debug info, much of the compile time (BNB_GPU_DEBUG=1 keeps Python's default -g).
        extra_compile_args=["-O2", "-fopenmp", "-ffp-contract=off", "-falign-loops=64",
                            *([] if os.environ.get("BNB_GPU_DEBUG") else ["-g0"])],
    )],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
