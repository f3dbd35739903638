// Codes of bfloat16 inputs by table, for blockwise 8-bit quantization (blockwise8.h).
//
// For a bfloat16 x and its block's absmax a (itself a bfloat16 value), x / a rounds to the float
// (significand(x) / significand(a)) * 2^-d, d = exponent(a) - exponent(x), as long as that quotient is normal: a
// power of two scales exactly. So, given a's 7 mantissa bits, the code of x depends only on x's sign, d and 7
// mantissa bits: one table per mantissa of a, of 2 * rows * 128 codes. From d = rows - 1 on, every quotient lies
// below the codebook's smallest midpoint magnitude, where codes no longer change, so larger d (and subnormal or
// zero x) share that row. An element then costs an index, computed a vector at a time, and one byte load instead
// of a search. One thread, 2^24 elements, blocksize 4096, Zen 3, ns per element: AVX2 0.76 -> 0.40, SSE4
// 0.98 -> 0.45, SSSE3 1.09 -> 0.48. A table is 2 * rows * 128 bytes (6 KB for the dynamic map), built on first
// use by the float32 kernel in about 50 us.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace bnb::core {

struct PreparedCodebook;

class Bf16Codes {
 public:
  // Null when some midpoint of cb is 0 (then x = +0 and the smallest x > 0 take different codes, so no row can
  // stand for all the smaller quotients) or so close to 0 that the rows would not fit the normal range.
  static std::shared_ptr<const Bf16Codes> Create(const PreparedCodebook& cb);

  int rows() const { return rows_; }

  // The position of bfloat16 x (bits) in the table for absmax bits `amax_bits`: 127 - mantissa(x) within row d,
  // the rows of negative x after those of positive x.
  static int Index(uint16_t amax_bits, int rows, uint16_t x_bits) {
    const int j = std::min<int>((amax_bits | 0x7F) - (x_bits & 0x7FFF), rows * 128 - 1);
    return x_bits & 0x8000 ? j + rows * 128 : j;
  }

  // The table for blocks of cb (the codebook this was created for) whose absmax has bfloat16 bits `amax_bits`
  // (positive and finite); null when that absmax is too small for the table's rows to hold (exponent below
  // rows - 1, or subnormal). Built on first use of each absmax mantissa; thread-safe.
  const uint8_t* Table(const PreparedCodebook& cb, uint16_t amax_bits) const;

 private:
  Bf16Codes(int rows, int min_exponent) : rows_(rows), min_exponent_(min_exponent) {}
  const uint8_t* Build(const PreparedCodebook& cb, int mantissa) const;

  int rows_;
  int min_exponent_;  // smallest biased exponent of an absmax the table serves
  mutable std::array<std::atomic<const uint8_t*>, 128> tables_{};
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<uint8_t[]>> storage_;
};

}  // namespace bnb::core
