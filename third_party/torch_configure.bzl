"""torch_configure: libtorch's headers and libraries from the torch package of the project's Python."""

load(":python_env.bzl", "find_python", "python_query")

_MIN = (2, 6)

def _impl(ctx):
    python = find_python(ctx)
    out = python_query(
        ctx,
        python,
        "import os, torch; print(torch.__version__.split('+')[0], int(torch._C._GLIBCXX_USE_CXX11_ABI), os.path.dirname(torch.__file__))",
        "importing torch (install it in the project's environment: tools/setup.sh, or pip install torch==2.13.0)",
    ).splitlines()[-1].split(" ", 2)
    version, abi, root = out[0], out[1], out[2]
    parts = version.split(".")
    if (int(parts[0]), int(parts[1])) < _MIN:
        fail("bnb: torch >= %d.%d is required, %s has %s" % (_MIN[0], _MIN[1], python, version))
    if abi != "1":
        fail("bnb: torch %s was built with _GLIBCXX_USE_CXX11_ABI=0; bnb and Debian's libraries use the C++11 ABI. Install a torch built with it (torch >= 2.7 from PyPI)." % version)
    ctx.symlink(root + "/include", "include")
    ctx.symlink(root + "/lib", "lib")

    # at::parallel_for is a header template: under an OpenMP build of torch, code that calls it must be compiled
    # with -fopenmp and use torch's own libgomp, or it silently runs on one thread.
    openmp = "#define AT_PARALLEL_OPENMP 1" in ctx.read(root + "/include/ATen/Config.h")
    gomp = []
    if openmp:
        found = [f.basename for f in ctx.path(root + "/lib").readdir() if f.basename.startswith("libgomp")]
        if not found:
            fail("bnb: torch %s uses OpenMP but ships no libgomp in %s/lib" % (version, root))
        gomp = ["lib/" + found[0]]
    ctx.file("defs.bzl", "TORCH_OPENMP_COPTS = %s\n" % repr(["-fopenmp"] if openmp else []))
    ctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# torch {version}
cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"], allow_empty = True),
    includes = ["include", "include/torch/csrc/api/include"],
    srcs = ["lib/libc10.so", "lib/libtorch_cpu.so", "lib/libtorch.so"] + {gomp},
    linkopts = ["-Wl,-rpath,{root}/lib"],
)
""".format(version = version, root = root, gomp = repr(gomp)))

torch_configure = repository_rule(implementation = _impl, environ = ["BNB_PYTHON"], local = True)
