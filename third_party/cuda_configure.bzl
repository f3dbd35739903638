"""cuda_configure: CUDA toolkit headers from CUDA_HOME or /usr/local/cuda, for sources that want them.

bnb links no CUDA library (the driver API and NVRTC are opened at run time), so a machine without the toolkit
still builds every target: the repository then holds an empty :headers and :have_cuda_headers is false.
"""

load(":python_env.bzl", "find_python")

def _find_nvrtc_dir(ctx, home):
    """A directory holding libnvrtc.so.13 (or .12): the toolkit's, else the nvidia-cuda-nvrtc wheel in .venv."""
    dirs = [home + "/lib64", home + "/lib"]
    venv_lib = ctx.path(find_python(ctx)).dirname.dirname.get_child("lib")
    if venv_lib.exists:
        for py in venv_lib.readdir():
            for cu in ["cu13", "cu12"]:
                dirs.append("%s/site-packages/nvidia/%s/lib" % (py, cu))
    for d in dirs:
        for so in ["libnvrtc.so.13", "libnvrtc.so.12"]:
            if ctx.path(d + "/" + so).exists:
                return d, so
    return None, None

def _impl(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    have = ctx.path(home + "/include/cuda.h").exists and ctx.path(home + "/include/nvrtc.h").exists
    if have:
        ctx.symlink(home + "/include", "include")
        version = ctx.execute(["sh", "-c", "grep -m1 'define CUDA_VERSION' %s/include/cuda.h | awk '{print $3}'" % home]).stdout.strip()
        body = 'cc_library(name = "headers", hdrs = glob(["include/*.h"]), includes = ["include"], defines = ["BNB_HAVE_CUDA_HEADERS=1"])\n'
        body += "# CUDA_VERSION %s at %s\n" % (version, home)
    else:
        print("bnb: no CUDA toolkit headers at %s (set CUDA_HOME to use others); CUDA kernels build from bnb's own declarations." % home)
        body = 'cc_library(name = "headers")\n'
    # NVRTC for tests that compile kernels (no GPU needed): a filegroup, and the library's runfiles path.
    nvrtc_dir, nvrtc_so = _find_nvrtc_dir(ctx, home)
    if nvrtc_dir:
        ctx.symlink(nvrtc_dir, "nvrtc_lib")
        body += 'filegroup(name = "nvrtc", srcs = glob(["nvrtc_lib/libnvrtc*"]))\n'
        nvrtc_path = "external/local_cuda/nvrtc_lib/" + nvrtc_so
    else:
        body += 'filegroup(name = "nvrtc", srcs = [])\n'
        nvrtc_path = ""
    ctx.file("defs.bzl", 'NVRTC_RUNFILES_PATH = "%s"\n' % nvrtc_path)
    ctx.file("BUILD.bazel", 'package(default_visibility = ["//visibility:public"])\n\n' + body)

cuda_configure = repository_rule(implementation = _impl, environ = ["CUDA_HOME", "BNB_PYTHON"], local = True)
