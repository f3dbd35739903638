// Codebooks for 8-bit blockwise quantization: the dynamic map, and the search tables a quantizer needs.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace bnb::core {

inline constexpr int kCodebookSize = 256;

// The dynamic quantization map of Dettmers (arXiv:1511.04561) as bitsandbytes'
// `create_dynamic_map(signed, max_exponent_bits, total_bits)` builds it: sorted ascending, padded with zeros to
// 256. The default (signed, 7, 8) is DefaultDynamicMap(); other arguments are computed, equal to bitsandbytes'
// within 2 ulps (torch.linspace, which bitsandbytes uses, itself varies by 1 ulp across CPU instruction sets).
// Fails when the arguments describe more than 256 values or max_exponent_bits is outside 1..total_bits-1.
absl::StatusOr<std::vector<float>> CreateDynamicMap(bool is_signed = true, int max_exponent_bits = 7,
                                                     int total_bits = 8);

// bitsandbytes' default map value for value, as torch's AVX2 CPU kernels (the usual x86 path) compute it.
std::vector<float> DefaultDynamicMap();

// The map computed by bitsandbytes' algorithm with scalar float32 arithmetic.
absl::StatusOr<std::vector<float>> ComputeDynamicMap(bool is_signed, int max_exponent_bits, int total_bits);

// A 256-entry codebook prepared for nearest-value search. Quantizing v picks the entry whose value is nearest,
// where "nearest" is decided by the midpoints between consecutive sorted values: the sorted position is the
// number of midpoints strictly below v (so a tie goes to the lower value, and NaN goes to the lowest entry).
// Among equal values the lowest code wins, as torch.argmin over |v - code| would pick.
struct PreparedCodebook {
  std::array<float, kCodebookSize> values;            // the codebook as given, indexed by code
  std::array<float, kCodebookSize - 1> midpoints;     // (sorted[i] + sorted[i+1]) * 0.5f, ascending
  std::array<int32_t, kCodebookSize> sorted_to_code;  // lowest code holding the i-th smallest value
  bool is_sorted;                                     // sorted_to_code is the identity
};

// Fails, naming the entry, when `n` is not 256 or an entry is not finite.
absl::StatusOr<PreparedCodebook> PrepareCodebook(const float* code, int64_t n);

// The code for an already scaled value, by the rule above. The scalar definition the vector kernels match.
inline uint8_t NearestCode(const PreparedCodebook& cb, float v) {
  int pos = 0;
  for (int step = 128; step > 0; step >>= 1) {
    if (v > cb.midpoints[pos + step - 1]) pos += step;
  }
  return static_cast<uint8_t>(cb.sorted_to_code[pos]);
}

}  // namespace bnb::core
