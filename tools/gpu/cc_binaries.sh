#!/usr/bin/env bash
# Builds every GoogleTest of bnb/tests and the core benchmarks of tools/bench without Bazel, for the GPU machine:
# there the CPU kernels meet instruction sets the dev VM lacks (AVX-512) and the CUDA tests meet a GPU. Called by
# tools/gpu/build.sh after it has unpacked .gpu-deps (libgtest-dev among them) into PREFIX and generated
# bnb/jit/kernels_embedded.cc under GEN_DIR; the binaries land in WORK_DIR/cc-bin, named as their Bazel targets.
#
#   tools/gpu/cc_binaries.sh PREFIX GEN_DIR WORK_DIR [NAME...]
#
# NAMEs (e.g. jit_cuda_test) build only those binaries (tools/gpu/check.sh needs the two CUDA tests, not all).
#
# The library is every bnb/core and bnb/jit source of tools/gpu/sources.txt (Bazel's list) plus the test-only
# fake compiler, fake runtime, CUDA emulator (bnb/tests/cuda_emu.cc) and fuzz cases; each bnb/tests/*_test.cc,
# tools/bench/core_*_bench.cc and tools/fuzz/core_*_fuzz.cc is one cc_test / cc_binary in its BUILD.bazel, with no
# sources beside it but headers.
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=$1 gen=$2 work=$3
shift 3
CXX=${CXX:-g++}
libdir=$prefix/usr/lib/x86_64-linux-gnu
obj=$work/cc-obj bin=$work/cc-bin host=$work/cc-host
mkdir -p "$obj" "$bin" "$host/bnb/jit"
[[ -f $libdir/libgtest_main.a ]] || { echo "no libgtest in $libdir: fetch_deps.sh fetches libgtest-dev" >&2; exit 1; }

# bnb/jit/BUILD.bazel's *_host_h genrules, for every kernel header (the tests include those they need).
for f in bnb/jit/kernels/*.cuh; do
  sh bnb/jit/host_header.sh "$f" >"$host/bnb/jit/$(basename "$f" .cuh)_host.h"
done

version=$(sed -n 's/^BNB_VERSION = "\(.*\)"/\1/p' version.bzl)
# -ffp-contract=off: bnb/core/BUILD.bazel's CORE_COPTS (no fused multiply-adds the references do not have).
flags=(-O2 -std=c++17 -fPIC -ffp-contract=off -falign-loops=64 -D_GLIBCXX_USE_CXX11_ABI=1 -DHWY_SHARED_DEFINE
       -DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1 "-DBNB_VERSION=\"$version\"" -I. -I"$host" -I"$prefix/usr/include")
lib_srcs=($(grep -E '^bnb/(core|jit)/.*\.cc$' tools/gpu/sources.txt))
lib_srcs+=(bnb/jit/fake_compiler.cc bnb/jit/fake_runtime.cc bnb/tests/cuda_emu.cc tools/fuzz/core_fuzz.cc
          "$gen/bnb/jit/kernels_embedded.cc")
object() { echo "$obj/$(echo "$1" | tr / _).o"; }
mains=(bnb/tests/*_test.cc tools/bench/core_*_bench.cc tools/fuzz/core_*_fuzz.cc)
if (( $# )); then
  wanted=()
  for name in "$@"; do
    found=
    for m in "${mains[@]}"; do [[ $(basename "$m" .cc) == "$name" ]] && wanted+=("$m") && found=1; done
    [[ -n $found ]] || { echo "cc_binaries.sh: no test, benchmark or fuzzer named $name" >&2; exit 1; }
  done
  mains=("${wanted[@]}")
fi
pids=()
spawn() {  # runs "$@" in the background, at most nproc at a time
  while (( $(jobs -rp | wc -l) >= $(nproc) )); do sleep 0.1; done
  "$@" &
  pids+=($!)
}
join() { for p in "${pids[@]}"; do wait "$p"; done; pids=(); }  # set -e: a failed job ends the script
for s in "${lib_srcs[@]}" "${mains[@]}"; do spawn "$CXX" "${flags[@]}" -c "$s" -o "$(object "$s")"; done
join

absl=($(cd "$libdir" && ls libabsl_*.so | sed 's/^lib\(.*\)\.so$/-l\1/'))
lib_objs=()
for s in "${lib_srcs[@]}"; do lib_objs+=("$(object "$s")"); done
for t in "${mains[@]}"; do
  spawn "$CXX" -o "$bin/$(basename "$t" .cc)" "$(object "$t")" "${lib_objs[@]}" -L"$libdir" -Wl,-rpath,"$libdir" \
    -lgtest_main -lgtest -lhwy -ltomlplusplus "${absl[@]}" -ldl -lpthread
done
join
