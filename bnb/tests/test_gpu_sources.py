"""tools/gpu/sources.txt (what the GPU machine builds without Bazel) equals Bazel's own list of bnb._C's files."""

import os
import pathlib


def test_gpu_build_uses_bazels_source_list():
    root = pathlib.Path(os.environ["TEST_SRCDIR"]) / os.environ.get("TEST_WORKSPACE", "bnb")
    bazel = (root / "tools/gpu/bazel_sources.txt").read_text().split()
    checked_in = (root / "tools/gpu/sources.txt").read_text().split()
    missing, extra = sorted(set(bazel) - set(checked_in)), sorted(set(checked_in) - set(bazel))
    assert not missing and not extra, (
        f"tools/gpu/sources.txt is stale: missing {missing}, extra {extra}. Refresh it with "
        f"bazel build //tools/gpu:bazel_sources && cp bazel-bin/tools/gpu/bazel_sources.txt tools/gpu/sources.txt")
