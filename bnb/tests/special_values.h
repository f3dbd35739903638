// Test inputs shared by the kernel tests: ordinary values with the special ones mixed in.
#pragma once

#include <cmath>
#include <random>

namespace bnb::tests {

// v, or (about six times in `one_in` draws) a special value in its place: NaN, +-inf, +-0, a subnormal, or v
// scaled by 1e-7 (a quotient far below its block's absmax).
inline float MaybeSpecial(std::mt19937& rng, float v, unsigned one_in = 97) {
  switch (rng() % one_in) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return 0.0f;
    case 4: return -0.0f;
    case 5: return 1e-40f;
    case 6: return v * 1e-7f;
    default: return v;
  }
}

}  // namespace bnb::tests
