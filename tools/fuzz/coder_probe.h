// The 8-bit quantize coders (bnb/core/blockwise8_coders-inl.h) one by one, on the instruction set dispatch picks
// now, each forced whatever dtype the kernels would pick it for: their codes of vectors of scaled values, lane by
// lane, for the exhaustive sweep (coders_exhaustive) and core_coders_test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bnb/core/codebook.h"

namespace bnb::fuzz {

enum class Coder { kBucket, kHalfBuckets };

const char* CoderName(Coder c);

// The coders the active instruction set's kernels use that can serve cb.
std::vector<Coder> CodersFor(const core::PreparedCodebook& cb);

// codes[i] of the scaled values v[i] in [-1, 1], i < n, by `coder` on the active instruction set, vector by vector.
// n is a multiple of kProbeGranule.
inline constexpr int64_t kProbeGranule = 64;
void ProbeCoder(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n, uint8_t* codes);

// Empty when every lane of ProbeCoder(coder, cb, v, n) has NearestCode's code; else the first that does not, as
// "v = ... (bits ...): code c, expected e".
std::string FirstWrongLane(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n);

}  // namespace bnb::fuzz
