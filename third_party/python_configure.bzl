"""python_configure: the project's Python as Bazel's Python toolchain, and its C headers as :headers."""

load(":python_env.bzl", "find_python", "python_query")

def _impl(ctx):
    python = find_python(ctx)
    info = python_query(ctx, python, "import sys, sysconfig; print(sys.version_info[0], sys.version_info[1], sysconfig.get_paths()['include'])", "asking Python for its version").split(" ", 2)
    major, minor, include = int(info[0]), int(info[1]), info[2]
    if major != 3 or minor < 9:
        fail("bnb: Python >= 3.9 is required, %s is %d.%d" % (python, major, minor))
    if not ctx.path(include + "/Python.h").exists:
        fail("bnb: Python.h not found in %s. Install the Python headers (apt-get install python3-dev)." % include)
    ctx.symlink(include, "include")
    ctx.file("defs.bzl", 'PYTHON_TAG = "cp%d%d"\n' % (major, minor))
    ctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(name = "runtime", interpreter_path = "{python}", python_version = "PY3")

py_runtime_pair(name = "pair", py3_runtime = ":runtime")

toolchain(name = "toolchain", toolchain = ":pair", toolchain_type = "@bazel_tools//tools/python:toolchain_type")

cc_library(name = "headers", hdrs = glob(["include/**/*.h"]), includes = ["include"])
""".format(python = python))

python_configure = repository_rule(implementation = _impl, environ = ["BNB_PYTHON"], local = True)
