#!/usr/bin/env bash
# The whole test suite: set up (idempotent), then every C++ and Python test under Bazel, and a one-line count.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
bazel test //... "$@"
status=$?
# Count the targets this run asked for (its patterns, or //...), not whatever bazel-testlogs still holds.
patterns=()
for a in "$@"; do [[ $a == -* ]] || patterns+=("$a"); done
((${#patterns[@]})) || patterns=(//...)
query="tests($(IFS=+; echo "${patterns[*]}"))"
mapfile -t targets < <(bazel query --noshow_progress "$query" 2>/dev/null)
if ((${#targets[@]})); then
  .venv/bin/python tools/test_summary.py bazel-testlogs "${targets[@]}"
fi
# Tests that loop over the instruction sets run only those this CPU has: say which were and were not exercised.
.venv/bin/python -m bnb info --isas 2>/dev/null || true
exit $status
