#!/usr/bin/env bash
# Nsight Compute profile of bnb's CUDA kernels on the GPU machine, after tools/gpu/build.sh has staged bnb there:
# speed of light, memory, occupancy and warp stall reasons for one launch of each kernel (tools/gpu/profile_ops.py).
# The card's clocks are left as they are (--clock-control none). Full report to $1 (default /tmp/bnb-gpu/ncu.txt);
# prints the headline rows. PROFILE_OPS: the ops to run (profile_ops.py's names; default its own), PROFILE_KERNELS:
# the kernels to profile (an ncu regex; default every quantize, gemv and optimizer kernel), PROFILE_SECTIONS: extra
# ncu sections (e.g. "SourceCounters InstructionStats" for the hottest SASS lines and the instruction mix).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${BNB_GPU_WORK:-/tmp/bnb-gpu}
report=${1:-$work/ncu.txt}
export PYTHONPATH=$work/stage LD_LIBRARY_PATH=$work/prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
extra=()
for section in ${PROFILE_SECTIONS:-}; do extra+=(--section "$section"); done
# shellcheck disable=SC2086  # PROFILE_OPS: words on purpose
ncu --clock-control none -k "regex:${PROFILE_KERNELS:-quantize|gemv|optimizer}" "${extra[@]}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    ${PYTHON:-python3} tools/gpu/profile_ops.py ${PROFILE_OPS:-} >"$report" 2>&1
headline='^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy'
headline+='|Registers Per|Shared Memory Configuration Size|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps'
headline+='|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Block Limit|Est\. Speedup|Stall|Executed Instructions '
grep -E "$headline" "$report" || tail -40 "$report"
