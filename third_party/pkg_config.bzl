"""pkg_config_library: a system library found with pkg-config, as one cc_library named after the repository.

Fails with a message naming the package to install when the library, its header or its version is missing.
"""

def _fail(ctx, what):
    fail("bnb: %s for @%s. Install it with: %s" % (what, ctx.name, ctx.attr.hint))

def _impl(ctx):
    pkg_config = ctx.which("pkg-config")
    if not pkg_config:
        fail("bnb: pkg-config not found. Install it with: apt-get install pkg-config")
    mods = ctx.attr.modules
    res = ctx.execute([pkg_config, "--exists", "--print-errors"] + mods)
    if res.return_code != 0:
        _fail(ctx, "pkg-config cannot find %s (%s)" % (" ".join(mods), res.stderr.strip()))
    if ctx.attr.min_version:
        res = ctx.execute([pkg_config, "--atleast-version=" + ctx.attr.min_version, mods[0]])
        if res.return_code != 0:
            have = ctx.execute([pkg_config, "--modversion", mods[0]]).stdout.strip()
            _fail(ctx, "%s %s is installed but >= %s is required" % (mods[0], have, ctx.attr.min_version))
    cflags = ctx.execute([pkg_config, "--cflags"] + mods).stdout.strip().split(" ")
    libs = [f for f in ctx.execute([pkg_config, "--libs"] + mods).stdout.strip().split(" ") if f]

    defines, includes = [], []
    for flag in cflags:
        if not flag:
            continue
        if flag.startswith("-D"):
            defines.append(flag[2:])
        elif flag.startswith("-I") and flag[2:] not in ("/usr/include", "/usr/local/include"):
            link = "include_%d" % len(includes)
            ctx.symlink(flag[2:], link)
            includes.append(link)

    found = False
    for root in ["/usr/include", "/usr/local/include"] + [str(ctx.path(i)) for i in includes]:
        if ctx.path(root + "/" + ctx.attr.header).exists:
            found = True
    if not found:
        _fail(ctx, "header <%s> not found" % ctx.attr.header)

    hdrs = ", ".join(['"%s/**"' % i for i in includes])
    ctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "{name}",
    hdrs = glob([{hdrs}]),
    includes = {includes},
    defines = {defines},
    linkopts = {libs},
)
""".format(name = ctx.name, hdrs = hdrs, includes = repr(includes), defines = repr(defines), libs = repr(libs)))

pkg_config_library = repository_rule(
    implementation = _impl,
    attrs = {
        "modules": attr.string_list(mandatory = True),
        "header": attr.string(mandatory = True),
        "hint": attr.string(mandatory = True),
        "min_version": attr.string(),
    },
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
