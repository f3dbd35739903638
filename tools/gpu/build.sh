#!/usr/bin/env bash
# Builds bnb without Bazel and runs its GPU tests and benchmarks: the one command for the GPU machine (no network,
# no Bazel). Needs the Debian packages from tools/gpu/fetch_deps.sh in .gpu-deps/ (carried there).
#
#   tools/gpu/build.sh [build|test|gtest|bench|all]      (default all; PYTHON=python3; build: bnb._C alone)
#
# Builds bnb._C from tools/gpu/sources.txt (Bazel's own list) into a staged package, then runs every GoogleTest
# (built by tools/gpu/cc_binaries.sh: AVX-512 and CUDA meet the C++ tests here), the CUDA-capable pytest files and
# the benchmarks with that package first on PYTHONPATH. tools/gpu/profile.sh profiles the kernels afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
# Under the device tool, everything printed also goes to $OUT/gpu-build.log, which comes back whole (the reply
# keeps only the output's last 12,000 characters, and the test summaries scroll out of them).
if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
  exec > >(tee -a "$OUT/gpu-build.log") 2>&1
fi
python=${PYTHON:-python3}
[[ $python == */* ]] && python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"  # tests run elsewhere
what=${1:-all}
work=${BNB_GPU_WORK:-/tmp/bnb-gpu}
unset BNB_GPU_WORK  # not a bnb knob: bnb would warn about it in every Python process below
prefix=$work/prefix
stage=$work/stage

# The system's g++, whose libstdc++ torch and Python load: the GPU machine's CXX (/opt/gcc/bin/g++, a wrapper with
# its own libraries) copied libstdc++'s stream code into bnb._C, and every number a TORCH_CHECK message printed
# through it crashed the process (seen on the H100: SIGSEGV in std::ostream::_M_insert<long> inside _C.so).
export CXX=${BNB_GPU_CXX:-$(command -v /usr/bin/g++ || command -v g++)}
mkdir -p "$prefix" "$stage/bnb"
compgen -G ".gpu-deps/*.deb" >/dev/null \
  || { echo "no .gpu-deps/*.deb: run tools/gpu/fetch_deps.sh where apt works, and carry .gpu-deps" >&2; exit 1; }
$python tools/gpu/unpack_deb.py "$prefix" .gpu-deps/*.deb

echo "[gpu] building bnb._C ($($python -c 'import torch; print("torch", torch.__version__)'), $CXX)"
t0=$(date +%s)
BNB_DEPS_PREFIX=$prefix BNB_GEN_DIR=$work/gen MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  $python tools/gpu/setup_ext.py -q build_ext --build-lib "$stage" --build-temp "$work/tmp" >"$work/build.log" 2>&1 \
  || { tail -50 "$work/build.log"; exit 1; }
echo "[gpu] built in $(( $(date +%s) - t0 )) s"
cp -r bnb/python/bnb/. "$stage/bnb/"
version=$(sed -n 's/^BNB_VERSION = "\(.*\)"/\1/p' version.bzl)
api=$(sed -n 's/^BITSANDBYTES_API_VERSION = "\(.*\)"/\1/p' version.bzl)
printf '__version__ = "%s"\n__bitsandbytes_version__ = "%s"\n' "$version" "$api" > "$stage/bnb/_version.py"
export PYTHONPATH=$stage
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
$python -c "import bnb, torch; print('[gpu] bnb', bnb.__version__, 'from', bnb.__file__, '| cuda:',
                                   torch.cuda.is_available())"
# The C++ tests find NVRTC through the loader and CUDA_HOME only (the Python package offers the wheel's copy to the
# same code): give them the wheel's, which the Python tests use, or they skip every compile without failing.
if [[ -z ${BNB_CUDA_NVRTC_PATH:-} ]]; then
  BNB_CUDA_NVRTC_PATH=$($python -c "import bnb.jit; print(bnb.jit.wheel_nvrtc_path())")
  [[ -n $BNB_CUDA_NVRTC_PATH ]] && export BNB_CUDA_NVRTC_PATH && echo "[gpu] NVRTC for the C++ tests: $BNB_CUDA_NVRTC_PATH"
fi

if [[ $what == gtest || $what == bench || $what == all ]]; then
  t0=$(date +%s)
  tools/gpu/cc_binaries.sh "$prefix" "$work/gen" "$work"
  echo "[gpu] C++ tests and core benchmarks built in $(( $(date +%s) - t0 )) s"
fi
status=0
if [[ $what == gtest || $what == all ]]; then
  for t in bnb/tests/*_test.cc; do
    name=$(basename "$t" .cc)
    if "$work/cc-bin/$name" --gtest_brief=1 >"$work/$name.log" 2>&1; then
      echo "[gtest] $name: $(grep -Eo '^\[  PASSED  \] [0-9]+' "$work/$name.log" | grep -Eo '[0-9]+$') passed," \
        "$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$work/$name.log" | grep -Eo '[0-9]+$' || echo 0) skipped"
    else
      status=1
      echo "[gtest] $name FAILED:"
      grep -E '^\[  FAILED|Failure|rror|Expected|Which is|actual' "$work/$name.log" | head -40
    fi
  done
  # A minute of random cases against the scalar definitions, here where the AVX-512 targets run.
  "$work/cc-bin/core_kernels_fuzz" 60 || status=1
fi
if [[ $what == test || $what == all ]]; then
  # The test files import their helpers by plain name; run from their folder's view with importlib mode. One
  # process per file, so that a crash in one leaves the others' results.
  for f in test_cuda.py test_blockwise8.py test_blockwise4.py test_ops_contract.py test_functional.py test_nn4bit.py \
           test_ops_fuzz.py test_int8.py test_int8_api.py test_linear8bitlt.py test_optim_ops.py test_optim.py \
           test_optim_api.py test_paged_memory.py; do
    echo "[pytest] $f"
    (cd bnb/tests && PYTHONPATH=$PYTHONPATH:$root/tools/fuzz $python -m pytest -q -p no:cacheprovider \
       --import-mode=importlib --rootdir="$root/bnb/tests" -rs "$f") || status=$?
  done
fi
if [[ $what == bench || $what == all ]]; then
  $python tools/bench/gpu_blockwise8.py || status=$?
  $python tools/bench/gpu_blockwise4.py || status=$?
  $python tools/bench/gpu_optim.py || status=$?
  $python tools/bench/gpu_int8.py || status=$?
  $python tools/bench/gpu_jit.py || status=$?
  # 512 threads per CTA halve the elements per thread at blocksize 4096, whose 8-bit quantize is the slowest
  # NVRTC compile (178 ms against ~150 with 512 threads, on the 2-core dev VM): its bandwidth decides the default.
  echo "[gpu] blockwise 8-bit again with cuda.threads_per_block = 512"
  BNB_CUDA_THREADS_PER_BLOCK=512 $python tools/bench/gpu_blockwise8.py || status=$?
  # The CPU kernels too: the GPU machine has 16 cores, where the CPU path meets memory bandwidth.
  (cd tools/bench && $python cpu_blockwise8.py && $python cpu_blockwise4.py) || status=$?
  "$work/cc-bin/core_blockwise8_bench" || status=$?
  "$work/cc-bin/core_blockwise4_bench" || status=$?
fi
exit $status
