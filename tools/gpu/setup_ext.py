"""Builds bnb._C with torch.utils.cpp_extension from tools/gpu/sources.txt, for machines without Bazel (the GPU
machine). The file list is Bazel's own (a test keeps sources.txt equal to //tools/gpu:bazel_sources).

  python3 tools/gpu/setup_ext.py build_ext --build-lib STAGE --build-temp TMP   (env BNB_DEPS_PREFIX: unpacked .debs)
"""

import os
import pathlib
import subprocess
import sys

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREFIX = pathlib.Path(os.environ.get("BNB_DEPS_PREFIX", "/"))
LIBDIR = PREFIX / "usr/lib/x86_64-linux-gnu"
VERSION = next(l.split('"')[1] for l in (ROOT / "version.bzl").read_text().splitlines() if l.startswith("BNB_VERSION"))


def generated(path: str, out_dir: pathlib.Path) -> str:
    """Makes a file Bazel generates; only the generators this script knows are accepted."""
    if path == "bnb/jit/kernels_embedded.cc":
        out = out_dir / "kernels_embedded.cc"
        cuh = sorted(str(p) for p in (ROOT / "bnb/jit/kernels").glob("*.cuh"))
        out.write_text(subprocess.run(["sh", str(ROOT / "bnb/jit/embed_kernels.sh"), *cuh], check=True,
                                      capture_output=True, text=True).stdout)
        return str(out)
    sys.exit(f"setup_ext.py: don't know how to generate {path}; teach generated() its Bazel genrule")


def sources(out_dir: pathlib.Path) -> list[str]:
    srcs = []
    for line in (ROOT / "tools/gpu/sources.txt").read_text().split("\n"):
        if line.startswith("generated: "):
            srcs.append(generated(line.removeprefix("generated: "), out_dir))
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
        include_dirs=[str(ROOT), str(PREFIX / "usr/include")],
        library_dirs=[str(LIBDIR)],
        libraries=["hwy", "tomlplusplus", *absl, "dl"],
        runtime_library_dirs=[str(LIBDIR)],
        define_macros=[("HWY_SHARED_DEFINE", None), ("TOML_HEADER_ONLY", "0"), ("TOML_SHARED_LIB", "1"),
                       ("BNB_VERSION", f'"{VERSION}"')],
        # -falign-loops=64 as bnb/core/BUILD.bazel builds the kernels (their timings move with loop alignment).
        extra_compile_args=["-O2", "-std=c++17", "-fopenmp", "-falign-loops=64"],
    )],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
