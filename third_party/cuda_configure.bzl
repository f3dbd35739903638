"""cuda_configure: CUDA toolkit headers from CUDA_HOME or /usr/local/cuda, for sources that want them.

bnb links no CUDA library (the driver API and NVRTC are opened at run time), so a machine without the toolkit
still builds every target: the repository then holds an empty :headers and :have_cuda_headers is false.
"""

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
    ctx.file("BUILD.bazel", 'package(default_visibility = ["//visibility:public"])\n\n' + body)

cuda_configure = repository_rule(implementation = _impl, environ = ["CUDA_HOME"], local = True)
