// The 8-bit quantize coders (bnb/core/blockwise8_coders-inl.h) one by one, on the instruction set dispatch picks
// now, each forced whatever codebook and dtype the kernels would pick it for: their raw codes and, per lane, whether
// they flag the lane for the exact redo. A coder is correct when every lane it does not flag has NearestCode's code,
// so lanes are checked one by one and a flagged lane cannot hide another's wrong code (as a redo of the whole vector
// in the kernels would). Used by the exhaustive sweep (coders_exhaustive) and by core_coders_test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bnb/core/codebook.h"

namespace bnb::fuzz {

enum class Coder { kBucket, kSegment, kTopSegment, kHalfBuckets };

const char* CoderName(Coder c);

// The coders the active instruction set compiles that can serve cb.
std::vector<Coder> CodersFor(const core::PreparedCodebook& cb);

// codes[i] and flagged[i] (1: the coder leaves lane i to its exact redo) of the scaled values v[i] in [-1, 1],
// i < n, by `coder` on the active instruction set, vector by vector. n is a multiple of kProbeGranule.
inline constexpr int64_t kProbeGranule = 64;
void ProbeCoder(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n, uint8_t* codes,
                uint8_t* flagged);

// Empty when every unflagged lane of ProbeCoder(coder, cb, v, n) has NearestCode's code; else the first lane that
// does not, as "v = ... (bits ...): code c, expected e".
std::string FirstWrongLane(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n);

}  // namespace bnb::fuzz
