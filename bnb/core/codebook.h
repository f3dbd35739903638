// Codebooks for 8-bit blockwise quantization: the dynamic map, and the search tables a quantizer needs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/core/dtype.h"

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
//
// For speed, scaled values in [-1, 1] are also found through buckets of their float bits (see BucketOf): each
// bucket spans 2^15 consecutive float magnitudes (1/256 of a binade) of one sign and holds at most one midpoint,
// so one 32-bit table entry and one integer compare give the code. A bucket that spans several midpoints, or whose
// midpoint lies below 2^-30 (where magnitudes are clamped), is marked for the binary search.
struct PreparedCodebook {
  std::array<float, kCodebookSize> values;            // the codebook as given, indexed by code
  std::array<float, kCodebookSize - 1> midpoints;     // (sorted[i] + sorted[i+1]) * 0.5f, ascending
  std::array<int32_t, kCodebookSize> sorted_to_code;  // lowest code holding the i-th smallest value
  bool is_sorted;                                     // sorted_to_code is the identity
  // 2 * kBuckets entries, positive values first. Bits [0, 15): the step's key (0x7FFF: no step); bit 15: search;
  // [16, 24): the code at or below the step; [24, 32): the code above it.
  std::vector<int32_t> buckets;

  static constexpr uint32_t kMagMin = 0x30800000u;  // 2^-30: smaller magnitudes share bucket 0 of their sign
  static constexpr uint32_t kMagOne = 0x3F800000u;  // 1.0f
  static constexpr int kBucketShift = 15;
  static constexpr int32_t kKeyMask = (1 << kBucketShift) - 1;
  static constexpr int32_t kSearch = 1 << 15;
  static constexpr int32_t kBuckets = static_cast<int32_t>((kMagOne - kMagMin) >> kBucketShift) + 1;
};

// Where a scaled value v in [-1, 1] (not NaN) falls: its bucket, and its key within the bucket, which grows with v.
struct BucketAndKey {
  int32_t bucket;
  int32_t key;
};
inline BucketAndKey BucketOf(float v) {
  using P = PreparedCodebook;
  const uint32_t bits = FloatToBits(v);
  uint32_t mag = bits & 0x7FFFFFFFu;
  mag = mag < P::kMagMin ? P::kMagMin : mag > P::kMagOne ? P::kMagOne : mag;
  const uint32_t rel = mag - P::kMagMin;
  const bool negative = bits >> 31;
  return {static_cast<int32_t>(rel >> P::kBucketShift) + (negative ? P::kBuckets : 0),
          static_cast<int32_t>(rel & P::kKeyMask) ^ (negative ? P::kKeyMask : 0)};
}

// Fails, naming the entry, when `n` is not 256 or an entry is not finite.
absl::StatusOr<PreparedCodebook> PrepareCodebook(const float* code, int64_t n);

// PrepareCodebook behind a small cache keyed by the codebook's bits, so repeated calls with the same codebook
// (the usual case) skip building the bucket tables. Thread-safe.
absl::StatusOr<std::shared_ptr<const PreparedCodebook>> PrepareCodebookCached(const float* code, int64_t n);

// Number of midpoints strictly below v: the position of v's nearest value among the sorted values.
inline int SortedPosition(const PreparedCodebook& cb, float v) {
  int pos = 0;
  for (int step = 128; step > 0; step >>= 1) {
    if (v > cb.midpoints[pos + step - 1]) pos += step;
  }
  return pos;
}

// The code for an already scaled value, by the rule above. The scalar definition the vector kernels match.
inline uint8_t NearestCode(const PreparedCodebook& cb, float v) {
  return static_cast<uint8_t>(cb.sorted_to_code[SortedPosition(cb, v)]);
}

}  // namespace bnb::core
