"""Entry point of every Python test target: runs pytest on the test file given as the first argument.

The rootdir is the test file's own folder: under --import-mode=importlib pytest names test modules after their
path below the rootdir, and a path starting "bnb/" would shadow the real `bnb` package with a namespace one.
"""

import os
import sys

import pytest

if __name__ == "__main__":
    rootdir = os.path.dirname(os.path.abspath(sys.argv[1]))
    args = ["-q", "-p", "no:cacheprovider", "--import-mode=importlib", "-rs", f"--rootdir={rootdir}"]
    if os.environ.get("XML_OUTPUT_FILE"):  # Bazel's per-test JUnit file, read by tools/test_summary.py
        args.append(f"--junitxml={os.environ['XML_OUTPUT_FILE']}")
    sys.exit(pytest.main(args + sys.argv[1:]))
