// Codes of bfloat16 inputs by table, for the blockwise quantizers (8-bit: blockwise8.h, 4-bit: blockwise4.h).
//
// For a bfloat16 x and its block's absmax a (itself a bfloat16 value), x / a rounds to the float
// (significand(x) / significand(a)) * 2^-d, d = exponent(a) - exponent(x), as long as that quotient is normal: a
// power of two scales exactly. So, given a's 7 mantissa bits, the code of x depends only on x's sign, d and 7
// mantissa bits: one table per mantissa of a, of 2 * rows * 128 codes. From d = rows - 1 on, every quotient lies
// below the smallest midpoint at which the code changes, where codes no longer change (for either sign), so larger
// d (and subnormal or zero x) share that row. An element then costs an index, computed a vector at a time, and one
// byte load instead of a search (figures: tools/bench/NOTES.md, 'bfloat16 code tables'). A table is
// 2 * rows * 128 bytes (6 KB for the dynamic map, 1.8 KB for NF4), built on first use.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/functional/function_ref.h"
#include "bnb/core/dtype.h"

namespace bnb::core {

class Bf16Codes {
 public:
  // Tables for a codebook whose code changes at no midpoint of magnitude below `boundary`. Null when boundary is
  // 0 (then x = +0 and the smallest x > 0 would take different codes) or so small that the rows would leave the
  // normal range.
  static std::shared_ptr<const Bf16Codes> Create(float boundary);

  // The smallest magnitude of a midpoint at which the code changes: midpoints[i] (ascending, n - 1 of them) lies
  // between sorted positions i and i + 1, whose codes are sorted_to_code[i] and [i + 1].
  template <class Code>
  static float SmallestCodeBoundary(const float* midpoints, const Code* sorted_to_code, int n) {
    float smallest = INFINITY;
    for (int i = 0; i + 1 < n; ++i) {
      if (sorted_to_code[i] != sorted_to_code[i + 1]) smallest = std::min(smallest, std::fabs(midpoints[i]));
    }
    return smallest;
  }

  int rows() const { return rows_; }

  // Bytes each table holds past its last entry, so a 32-bit load at any entry stays in bounds (gathers).
  static constexpr int kPadding = 3;

  // The position of bfloat16 x (bits) in the table for absmax bits `amax_bits`: with x's magnitude bits m (sign
  // cleared) and bottom = the magnitude bits of the last row's first entry, 2 * max(m - bottom, 0) + sign. Rows
  // ascend with the magnitude, the two signs interleave, and every value below the last row takes position 0 (the
  // last row's code, which both signs share). The rule is the 16-bit vector one of Bf16IndexRule: four operations
  // (shift, shift, or, saturating subtract) where clamping and placing the sign separately took six.
  static int Index(uint16_t amax_bits, int rows, uint16_t x_bits) {
    const int magnitude_and_sign = (x_bits & 0x7FFF) << 1 | x_bits >> 15;
    return std::max(magnitude_and_sign - 2 * Bottom(amax_bits, rows), 0);
  }

  // Index's `bottom` (the magnitude bits of 1.0 * 2^(exponent(a) - (rows - 1))); 0 below the exponents the tables
  // serve, where no table is used.
  static int Bottom(uint16_t amax_bits, int rows) { return std::max((amax_bits & 0x7F80) - (rows - 1) * 128, 0); }

  // The byte a kernel wants for each x[k] / amax, k < n: its code (8-bit), or a value that maps to its code (4-bit:
  // the sorted position), by the codebook's own rule (its scalar definition, or a kernel equal to it).
  using Fill = absl::FunctionRef<void(float amax, const float* x, int64_t n, uint8_t* codes)>;

  // The bfloat16 bits of a block's absmax (a bfloat16 value widened to float).
  static uint16_t AbsmaxBits(float amax) { return static_cast<uint16_t>(FloatToBits(amax) >> 16); }

  // The table for blocks whose absmax is `amax` (Table), or null when they must be searched instead: absmax 0 or
  // not finite, or one the tables do not serve. The one rule both quantizers' bfloat16 paths follow.
  const uint8_t* TableFor(float amax, Fill fill) const {
    return std::isfinite(amax) && amax != 0.0f ? Table(AbsmaxBits(amax), fill) : nullptr;
  }

  // The table for blocks whose absmax has bfloat16 bits `amax_bits` (positive and finite), filled by `fill` on
  // first use of each absmax mantissa (every call must pass the same codebook's fill); thread-safe. Null when that
  // absmax is too small for the rows to hold (exponent below rows - 1, or subnormal).
  const uint8_t* Table(uint16_t amax_bits, Fill fill) const {
    if ((amax_bits >> 7) < min_exponent_) return nullptr;
    const uint8_t* table = tables_[amax_bits & 0x7F].load(std::memory_order_acquire);
    return table != nullptr ? table : BuildOnce(amax_bits & 0x7F, fill);
  }

 private:
  Bf16Codes(int rows, int min_exponent) : rows_(rows), min_exponent_(min_exponent) {}
  const uint8_t* BuildOnce(int mantissa, Fill fill) const;
  const uint8_t* Build(int mantissa, Fill fill) const;

  int rows_;
  int min_exponent_;  // smallest biased exponent of an absmax the tables serve
  mutable std::array<std::atomic<const uint8_t*>, 128> tables_{};
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<uint8_t[]>> storage_;
};

}  // namespace bnb::core
