#!/usr/bin/env bash
# CPU benchmarks: the ops through torch (beside a memory copy) and the core kernels per instruction set.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/setup.sh >/dev/null
.venv/bin/python tools/bench/cpu_blockwise8.py "$@"
echo
.venv/bin/python tools/bench/cpu_blockwise4.py "$@"
echo
.venv/bin/python tools/bench/cpu_gemv4.py
echo
.venv/bin/python tools/bench/cpu_optim.py "$@"
echo
.venv/bin/python tools/bench/cpu_int8.py "$@"
echo
.venv/bin/python tools/bench/cpu_decode.py  # needs tools/requirements-hf.txt (says so and skips otherwise)
echo
echo "core kernels, one thread (bazel run -c opt //tools/bench:core_blockwise8_bench):"
bazel run -c opt --noshow_progress //tools/bench:core_blockwise8_bench 2>/dev/null
echo
echo "4-bit core kernels, one thread (bazel run -c opt //tools/bench:core_blockwise4_bench):"
bazel run -c opt --noshow_progress //tools/bench:core_blockwise4_bench 2>/dev/null
echo
echo "8-bit optimizer step and its stages, one thread (bazel run -c opt //tools/bench:core_optim_bench):"
bazel run -c opt --noshow_progress //tools/bench:core_optim_bench 2>/dev/null
echo
echo "dot-product ceiling, one thread (bazel run -c opt //tools/bench:core_dot_peak):"
bazel run -c opt --noshow_progress //tools/bench:core_dot_peak 2>/dev/null
