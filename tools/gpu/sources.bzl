"""cc_source_manifest: the C++ sources and headers of a target's dependencies inside this repository, one per line.

The GPU machine builds bnb without Bazel (tools/gpu/build.sh) from tools/gpu/sources.txt; a test compares that file
with this manifest, so the two builds cannot drift apart. Generated sources are listed as "generated: <path>".
"""

CcSourcesInfo = provider(fields = ["files"])

def _collect(target, ctx):
    files = []
    for attr in ["srcs", "hdrs", "textual_hdrs"]:
        for f in getattr(ctx.rule.files, attr, []):
            if f.owner.workspace_name == "":
                files.append(f)
    deps = [d[CcSourcesInfo].files for d in getattr(ctx.rule.attr, "deps", []) if CcSourcesInfo in d]
    return [CcSourcesInfo(files = depset(files, transitive = deps))]

cc_sources_aspect = aspect(implementation = _collect, attr_aspects = ["deps"])

def _manifest_impl(ctx):
    lines = []
    for dep in ctx.attr.deps:
        for f in dep[CcSourcesInfo].files.to_list():
            lines.append(("generated: " + f.short_path) if not f.is_source else f.short_path)
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, "\n".join(sorted(depset(lines).to_list())) + "\n")
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

cc_source_manifest = rule(
    implementation = _manifest_impl,
    attrs = {"deps": attr.label_list(aspects = [cc_sources_aspect])},
)
