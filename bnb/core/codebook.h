// Codebooks for 8-bit blockwise quantization: the dynamic map, and the search tables a quantizer needs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/core/dtype.h"

namespace bnb::core {

class Bf16Codes;

inline constexpr int kCodebookSize = 256;

// The dynamic quantization map of Dettmers (arXiv:1511.04561) as bitsandbytes'
// `create_dynamic_map(signed, max_exponent_bits, total_bits)` builds it: sorted ascending, padded with zeros to
// 256, bit for bit as torch's linspace computes it on x86 CPUs with FMA (AVX2 and up: one rounding per value).
// Takes the arguments bitsandbytes takes, odd ones included (a signed map with max_exponent_bits above
// total_bits - 1 starts its decades lower). Fails, naming them, where bitsandbytes fails: arguments whose map does
// not hold exactly 2^total_bits values (its assert), max_exponent_bits < 1 (its NameError), and total_bits outside
// 1..8 (a map the 8-bit ops could not take).
absl::StatusOr<std::vector<float>> CreateDynamicMap(bool is_signed = true, int max_exponent_bits = 7,
                                                     int total_bits = 8);

// bitsandbytes' default map, value for value: a pinned table, equal to ComputeDynamicMap(true, 7, 8).
std::vector<float> DefaultDynamicMap();

// The map computed by bitsandbytes' algorithm (CreateDynamicMap without the pinned default).
absl::StatusOr<std::vector<float>> ComputeDynamicMap(bool is_signed, int max_exponent_bits, int total_bits);

// A second bucket table, for the x86 targets that fetch table entries by scalar loads (a bucket's entry costs one
// load, however many buckets there are, but a smaller table keeps more of its used part in L1): bucket = float
// bits of a scaled value v in [-1, 1] >> 16 (sign, exponent and 7 mantissa bits; 128 buckets per binade), key =
// bits & 0xFFFF. Entry: bits [0, 16) `split`, the largest key whose code is the code at key 0 (0xFFFF: one code
// for the whole bucket); [16, 24) the code of the keys above split; [24, 32) the code of the keys up to it. So
// the code is (key > split ? entry << 8 : entry) >> 24, as NearestCode gives it. Empty (unusable) when some bucket
// holds more than one midpoint; the dynamic map's buckets hold at most one.
struct HalfBuckets {
  static constexpr int kShift = 16;
  static constexpr int32_t kEntries = (0xBF800000u >> kShift) + 1;  // through -1.0f; 0x3F81..0x7FFF unused
  std::vector<int32_t> entries;
};

// The split between two neighbouring sorted codebook values lo <= hi (finite): the largest float t such that every
// float v <= t is at least as near lo as hi, so v takes hi exactly when v > t, and an exact tie takes lo. That is
// (lo + hi) * 0.5f, except where that rounding lands above the true midpoint: a v equal to it is nearer hi, and
// the split is then the float just below (54 of the signed dynamic map's 255 midpoints, 6 of NF4's 15). Twin of
// bnb::SplitPoint in bnb/jit/kernels/numerics.cuh (a test keeps them equal).
float SplitPoint(float lo, float hi);

// A 256-entry codebook prepared for nearest-value search. Quantizing v picks the entry whose value is nearest:
// the sorted position is the number of splits (SplitPoint, the "midpoints" below) strictly below v, so an exact
// tie goes to the lower value, and NaN to the lowest entry. Among equal values the lowest code wins, as
// torch.argmin over |v - code| would pick.
//
// For speed, scaled values in [-1, 1] are also found through buckets of their float bits: bucket = bits >> 15
// (2^15 consecutive magnitudes of one sign, 1/256 of a binade; negative values from kNegativeBuckets on) and
// key = bits & 0x7FFF, the position inside the bucket. A bucket holding at most one midpoint is one table entry:
// the code is `key >= threshold ? high : low`, one gather and an integer compare. A bucket spanning several
// midpoints has threshold kSearch and takes the binary search.
struct PreparedCodebook {
  std::array<float, kCodebookSize> values;            // the codebook as given, indexed by code
  std::array<float, kCodebookSize - 1> midpoints;     // SplitPoint(sorted[i], sorted[i+1]), ascending
  std::array<int32_t, kCodebookSize> sorted_to_code;  // lowest code holding the i-th smallest value
  // Indexed by bits >> 15 (kTableSize entries; indexes between the two signs' ranges are never used). Bits
  // [0, 16): threshold (0x8000: no midpoint; kSearch: several); [16, 24): low code; [24, 32): high code.
  std::vector<int32_t> buckets;
  bool needs_search;  // some bucket in use has threshold kSearch
  HalfBuckets half_buckets;
  // Codes of bfloat16 inputs by table (bf16_codes.h), built lazily and shared by copies; null for codebooks whose
  // code changes at 0.
  std::shared_ptr<const Bf16Codes> bf16_codes;

  static constexpr int kBucketShift = 15;
  static constexpr int32_t kKeyMask = (1 << kBucketShift) - 1;
  static constexpr int32_t kSearch = 0xFFFF;
  static constexpr int32_t kPositiveBuckets = (0x3F800000 >> kBucketShift) + 1;  // magnitudes up to 1.0f
  static constexpr int32_t kNegativeBuckets = 1 << (31 - kBucketShift);          // first index of the negative ones
  static constexpr int32_t kTableSize = kNegativeBuckets + kPositiveBuckets;
};

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
