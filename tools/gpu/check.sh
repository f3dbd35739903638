#!/usr/bin/env bash
# The one prepared script for the first minutes on a GPU machine (issue 22), most important first; every stage
# timestamped, its whole output in $OUT/<n>-<stage>.log (the device tool brings $OUT back; stdout gets the
# headlines, as only its last 12,000 characters come back), a summary in $OUT/check.log:
#
#   1 env    nvidia-smi, Python, torch (CUDA, C++ ABI and standard), compilers                           ~5 s
#   2 build  bnb._C by tools/gpu/build.sh's build stage (-g0, all cores), the staged package                ~45 s
#   3 smoke  tools/gpu/smoke.py: every CUDA op family against the CPU's scalar path, bit for bit            ~30 s
#   4 bench  tools/bench/gpu_blockwise8.py, gpu_blockwise4.py (bandwidth beside a copy, gemv), gpu_optim.py,
#            gpu_int8.py, gpu_jit.py                                                                      ~95 s
#   5 test   pytest -k cuda over the CUDA-capable test files (~75 s), then the two CUDA GoogleTests (~55 s)
#
#   tools/gpu/check.sh [env|build|smoke|bench|test ...]      (default: all five; a rerun on a warm machine can
#                                                            skip the build: check.sh smoke bench test)
#
# Stops at the first sticky CUDA error (an illegal address or launch failure loses the context: nothing after it
# would mean anything). A stage starts only while at least its estimate is left of CHECK_BUDGET_S (default 480 s
# from the start), so that the script ends with its summary before the device tool's limit; skipped stages say so.
# CPU-only tests, fuzzing and CPU benchmarks do not run here (CI runs them); tools/gpu/build.sh runs everything.
#
# The estimate (~4.5 min; ~7 with a 1.5x margin for a slower host CPU, CUDA context creation, a cold disk) comes
# from measurements on the 2-core dev VM (no GPU), scaled to the GPU machine's 16 cores where the work is parallel:
# - build: build.sh build took 166 s here with 2 jobs (301 s of CPU over 69 units, the slowest unit 14 s): 301 / 16
#   plus the slowest unit and the link, ~45 s. The two GoogleTests (cc_binaries.sh with their names): 63 s here,
#   ~15 s there.
# - NVRTC: 90-123 ms per kernel on average here, 165 ms at most (gemv4), over jit_nvrtc_test's 418 compiles; one
#   thread per process. smoke.py compiles ~60 kernels (~8 s), the CUDA pytest cases ~130 more (their disk cache is
#   the smoke's), jit_cuda_test ~80 and jit_cuda4_test ~170 with their disk cache off, side by side (~25 s), and
#   gpu_jit.py 10 in two fresh processes.
# - the rest: smoke.py --dry runs all its cases in 4 s here (the CPU references are the same there); the CPU side
#   of the ~530 CUDA pytest cases took 20 s as their CPU twins here, plus torch.compile and two subprocesses; the
#   benchmarks time ~30 rows of 20-50 launches of about a millisecond and 3 gemv shapes, with two fresh processes
#   for the JIT (~3 s each for torch, bnb and a CUDA context).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${OUT:-/tmp/bnb-check}
mkdir -p "$out"
exec > >(tee -a "$out/check.log") 2>&1
python=${PYTHON:-python3}
work=${BNB_GPU_WORK:-/tmp/bnb-gpu}
logs=$work/logs  # per-program logs; $OUT gets them merged by stage (the device tool brings back 8 files at most)
mkdir -p "$logs"
unset BNB_GPU_WORK  # bnb warns about BNB_ variables that name no knob; build.sh gets it on its command line
budget=${CHECK_BUDGET_S:-480}
start=$(date +%s)
stages=("$@")
(( ${#stages[@]} )) || stages=(env build smoke bench test)
status=0
# The texts of errors after which the CUDA context is lost (smoke.py's STICKY): later stages would only fail.
sticky_re='illegal memory access|unspecified launch failure|misaligned address|illegal instruction'
sticky_re+='|device-side assert|uncorrectable ECC|launch timed out|hardware stack error'

stamp() { printf '[check %s +%ds] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - start ))" "$*"; }
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }
# room NAME SECONDS: whether the budget has SECONDS left for stage NAME; says so when not.
room() {
  local left=$(( budget - ($(date +%s) - start) ))
  (( left >= $2 )) && return 0
  stamp "$1: SKIPPED, ${left} s of the ${budget} s budget left, it needs ~$2 s"
  status=1
  return 1
}
# stop_if_sticky LOG: ends the run when LOG shows a sticky CUDA error.
stop_if_sticky() {
  if grep -Eq "$sticky_re" "$1"; then
    stamp "STOP: sticky CUDA error in $(basename "$1"):"
    grep -Em3 "$sticky_re" "$1"
    exit 2
  fi
}

stamp "stages: ${stages[*]}; logs in $out; budget ${budget} s"

if want env; then
  stamp "1 env"
  {
    nvidia-smi --format=csv \
      --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,persistence_mode,mig.mode.current \
      2>&1 || echo "nvidia-smi failed"
    nvidia-smi -q -d CLOCK,PERFORMANCE 2>/dev/null | grep -E 'Graphics|SM|Memory|Throttle|Active' | head -20
    echo "nproc $(nproc); $(free -g | awk '/Mem:/ {print $2 " GB RAM"}');" \
         "disk: $(df -h /tmp | awk 'NR==2 {print $4}') free"
    for tool in /usr/bin/g++ g++ cmake ninja nvcc ncu; do
      command -v "$tool" >/dev/null && echo "$tool: $("$tool" --version 2>&1 | head -1)" || echo "$tool: not found"
    done
    $python - <<'EOF'
import importlib.util, inspect, platform, re, sys
import torch
import torch.utils.cpp_extension as ext
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| cuda available:", torch.cuda.is_available(),
      "| C++11 ABI:", torch._C._GLIBCXX_USE_CXX11_ABI)
std = re.findall(r"c\+\+(\d\d)'", inspect.getsource(ext.BuildExtension))
print("torch's extension C++ standard: c++" + (std[0] if std else "? (none found in BuildExtension)"))
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device 0: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.0f} GiB, L2 {p.L2_cache_size / 2**20:.0f} MiB")
spec = importlib.util.find_spec("nvidia")
print("nvidia wheels:", sorted(spec.submodule_search_locations) if spec else "none")
for name in ("bitsandbytes", "pytest", "numpy"):
    print(name, "installed" if importlib.util.find_spec(name) else "not installed")
EOF
  } >"$out/1-env.log" 2>&1
  cat "$out/1-env.log"
fi

if want build; then
  if room build 90; then
    stamp "2 build"
    if OUT= MAX_JOBS=$(nproc) BNB_GPU_WORK=$work PYTHON=$python tools/gpu/build.sh build >"$out/2-build.log" 2>&1; then
      tail -3 "$out/2-build.log"
    else
      stamp "build FAILED (nothing else can run):"
      tail -40 "$out/2-build.log"
      cp "$work/build.log" "$out/2-build-compiler.log" 2>/dev/null
      exit 1
    fi
  fi
fi

# As tools/gpu/build.sh stages the package and its libraries.
[[ -f $work/stage/bnb/__init__.py ]] || { stamp "no staged bnb in $work/stage: run the build stage"; exit 1; }
export PYTHONPATH=$work/stage
export LD_LIBRARY_PATH=$work/prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [[ -z ${BNB_CUDA_NVRTC_PATH:-} ]]; then  # the C++ tests find NVRTC only through it (see build.sh)
  BNB_CUDA_NVRTC_PATH=$($python -c "import bnb.jit; print(bnb.jit.wheel_nvrtc_path())" 2>/dev/null)
  [[ -n $BNB_CUDA_NVRTC_PATH ]] && export BNB_CUDA_NVRTC_PATH
fi
# A kernel cache of this run's own: the JIT figures and the compile counts must not depend on an earlier run.
export BNB_CACHE_DIR=$work/kernels-$start
mkdir -p "$BNB_CACHE_DIR" && chmod 700 "$BNB_CACHE_DIR"

if want smoke && room smoke 45; then
  stamp "3 smoke"
  timeout 240 $python tools/gpu/smoke.py >"$out/3-smoke.log" 2>&1
  rc=$?
  grep -E '^FAIL' "$out/3-smoke.log" | head -20  # all of them in 3-smoke.log
  grep -E '^smoke:' "$out/3-smoke.log"
  (( rc == 0 )) || status=1
  (( rc == 124 )) && stamp "smoke TIMED OUT after 240 s"
  (( rc == 2 )) && { stamp "STOP: sticky CUDA error in the smoke test"; exit 2; }
  stop_if_sticky "$out/3-smoke.log"
fi

if want bench && room bench 110; then
  stamp "4 bench"
  for b in gpu_blockwise8 gpu_blockwise4 gpu_optim gpu_int8 gpu_jit; do
    (cd tools/bench && timeout 180 $python $b.py) >"$logs/4-$b.log" 2>&1 || { status=1; stamp "$b FAILED:"; }
    tee -a "$out/4-bench.log" <"$logs/4-$b.log"
    stop_if_sticky "$logs/4-$b.log"
  done
fi

if want test && room test 90; then
  stamp "5 test: pytest -k cuda"
  # One process over the files (imports once); the test files import their helpers by plain name.
  (cd bnb/tests && timeout 300 $python -m pytest -q -p no:cacheprovider --import-mode=importlib \
     --rootdir="$root/bnb/tests" -rfEs --durations=5 -k cuda \
     test_cuda.py test_blockwise8.py test_blockwise4.py test_functional.py test_nn4bit.py test_int8.py \
     test_int8_api.py test_linear8bitlt.py test_optim_ops.py test_optim_api.py test_ops_contract.py \
     test_parametrize.py test_paged_memory.py test_packed4.py) \
    >"$out/5-pytest.log" 2>&1 || status=1
  grep -E '^(FAILED|ERROR)|passed|failed|error' "$out/5-pytest.log" | tail -25
  stop_if_sticky "$out/5-pytest.log"
  if room gtest 60; then
    stamp "5 test: the CUDA GoogleTests"
    if tools/gpu/cc_binaries.sh "$work/prefix" "$work/gen" "$work" jit_cuda_test jit_cuda4_test \
         >"$logs/5-gtest-build.log" 2>&1; then
      # Side by side: each compiles its ~80 / ~170 kernels itself (disk cache off) on one thread.
      pids=()
      for t in jit_cuda_test jit_cuda4_test; do
        timeout 240 "$work/cc-bin/$t" --gtest_brief=1 >"$logs/5-$t.log" 2>&1 &
        pids+=($!)
      done
      for i in 0 1; do wait "${pids[$i]}" || status=1; done
      for t in jit_cuda_test jit_cuda4_test; do
        echo "$t:"
        grep -E '^\[  (PASSED|FAILED|SKIPPED) |disk hit load|Failure' "$logs/5-$t.log" | head -20
        cat "$logs/5-$t.log" >>"$out/5-gtest.log"
        stop_if_sticky "$logs/5-$t.log"
      done
    else
      status=1
      stamp "building the GoogleTests FAILED:"
      tail -20 "$logs/5-gtest-build.log" | tee -a "$out/5-gtest.log"
    fi
  fi
fi

stamp "done, exit $status"
exit $status
