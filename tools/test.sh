#!/usr/bin/env bash
# The whole test suite: set up (idempotent), then every C++ and Python test under Bazel, and a one-line count.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
bazel test //... "$@"
status=$?
.venv/bin/python tools/test_summary.py bazel-testlogs
exit $status
