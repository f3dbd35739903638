"""Entry point of every Python test target: runs pytest on the test file given as the first argument.

The rootdir is the test file's own folder: under --import-mode=importlib pytest names test modules after their
path below the rootdir, and a path starting "bnb/" would shadow the real `bnb` package with a namespace one.
"""

import os
import sys

import pytest

if __name__ == "__main__":
    rootdir = os.path.dirname(os.path.abspath(sys.argv[1]))
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--import-mode=importlib", "-rs", f"--rootdir={rootdir}"]
                         + sys.argv[1:]))
