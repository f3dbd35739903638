// Blockwise 8-bit quantization over raw buffers: each block of `blocksize` consecutive elements is scaled by its
// absolute maximum and every scaled value becomes the code of its nearest codebook entry (codebook.h).
//
// Both kernels work on the blocks [block_begin, block_end) of an n-element buffer, so callers can split the
// blocks across threads; the last block of the buffer may be partial. Vectorized (Highway, the best instruction
// set allowed by cpu_isa.h) and scalar versions give identical codes, absmax and outputs.
//
// Special values (a block's values cannot be told apart once it holds one of these, so it never comes back
// looking finite and plausible):
//   - a block holding NaN gets absmax NaN and dequantizes to NaN everywhere;
//   - a block holding +-inf gets absmax inf; +-inf encode as the codes nearest +-1, so they come back as +-inf,
//     and the block's finite values come back as NaN (0 * inf);
//   - an all-zero block gets absmax 0 and dequantizes to zeros.
#pragma once

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "bnb/core/codebook.h"
#include "bnb/core/dtype.h"

namespace bnb::core {

inline constexpr int64_t kMinBlocksize = 32;
inline constexpr int64_t kMaxBlocksize = 4096;
// The CPU 8-bit kernels also take larger blocks, as bitsandbytes' CPU path does (its tests quantize with 16384).
inline constexpr int64_t kMaxCpuBlocksize8 = int64_t{1} << 30;

// OK for powers of two in [32, max]; otherwise an error that names the value and the allowed range.
absl::Status CheckBlocksize(int64_t blocksize, int64_t max = kMaxBlocksize);

inline int64_t NumBlocks(int64_t n, int64_t blocksize) { return (n + blocksize - 1) / blocksize; }

// The value a block element is scaled to before its code is looked up: x / absmax, with the special cases
// above (absmax 0 -> 0; an infinite x in an infinite-absmax block -> +-1).
inline float ScaleToUnit(float x, float absmax) {
  if (absmax == 0.0f) return 0.0f;
  if (std::isinf(x)) return x > 0 ? 1.0f : -1.0f;
  return x / absmax;
}

// The absmax of elements [lo, hi) of x (`dtype`), by the rule above: max |x|, or NaN when any element is NaN. The
// scalar definition the vectorized absmax passes (8- and 4-bit) match.
float BlockAbsmaxScalar(DType dtype, const void* x, int64_t lo, int64_t hi);

struct Blockwise8Range {
  int64_t n;           // elements in the whole buffer
  int64_t blocksize;   // power of two in [32, kMaxCpuBlocksize8]
  int64_t block_begin;
  int64_t block_end;   // <= NumBlocks(n, blocksize)
};

// x: n elements of `dtype`. Writes codes[block_begin*blocksize ...) and absmax[block_begin ... block_end).
void QuantizeBlockwise8(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r,
                        uint8_t* codes, float* absmax);
// out: n elements of `dtype`; out = cb.values[codes] * absmax, computed in float32, rounded to nearest even.
void DequantizeBlockwise8(DType dtype, const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                          const Blockwise8Range& r, void* out);

// codes[k] = the code of x[k] / amax, k < n, for values no larger than amax in magnitude: QuantizeBlockwise8 over
// blocks led by amax itself, so that every block's absmax is amax. Fills the bfloat16 code tables (bf16_codes.h).
void QuantizeByAbsmax8(const PreparedCodebook& cb, float amax, const float* x, int64_t n, uint8_t* codes);

// Plain scalar versions: the definition the vectorized ones are tested against.
void QuantizeBlockwise8Scalar(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r,
                              uint8_t* codes, float* absmax);
void DequantizeBlockwise8Scalar(DType dtype, const uint8_t* codes, const float* absmax, const float* code_values,
                                const Blockwise8Range& r, void* out);

}  // namespace bnb::core
