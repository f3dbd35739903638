// Differential fuzzing of the core CPU kernels (blockwise8.h, blockwise4.h): each case draws an instruction set,
// dtype, blocksize, length, input data (normal, log-uniform, ties, specials, zero runs), codebook (the dynamic maps,
// random sorted ones, unsorted ones with repeats), a split into block ranges as threads take them, and misaligned
// outputs, then checks the dispatched kernels against the scalar definitions bit for bit. A case is replayed by its
// seed alone.
#pragma once

#include <cstdint>
#include <string>

namespace bnb::fuzz {

// Empty when every kernel of case `seed` equals its scalar definition, else what differed and where. `large`: the
// case may draw an input of tens of millions of elements (past the streaming-store threshold; seconds each). Leaves
// the instruction-set cap at "best".
std::string RunCoreCase(uint64_t seed, bool large);

struct CoreFuzzResult {
  int64_t cases = 0;     // cases run
  std::string mismatch;  // the first failing case's RunCoreCase message; empty when none failed
};

// Cases first_seed, first_seed + 1, ... until max_cases have run or max_seconds have passed, or one fails.
CoreFuzzResult RunCoreFuzz(uint64_t first_seed, int64_t max_cases, double max_seconds, bool large);

}  // namespace bnb::fuzz
