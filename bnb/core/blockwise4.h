// Blockwise 4-bit quantization (NF4, FP4) over raw buffers, packed two codes per byte as bitsandbytes packs them.
//
// Each block of `blocksize` consecutive elements is scaled by its absolute maximum exactly as the 8-bit kernels
// scale it (blockwise8.h: same absmax, same ScaleToUnit, same special-value policy), and every scaled value
// becomes the 4-bit code of its nearest entry of a 16-value codebook. Codes are packed bitsandbytes' way: byte k
// holds element 2k in its high nibble and element 2k+1 in its low nibble; an odd element count fills the last
// low nibble with the code of 0.0 (PadCode4), as bitsandbytes' CUDA kernel quantizes the missing element as 0.
// A buffer of n elements packs into PackedSize4(n) = (n + 1) / 2 bytes, and since blocksizes are even, block b
// owns bytes [b * blocksize / 2, ...): blocks split across threads never share a byte.
//
// Vectorized (Highway, the best instruction set allowed by cpu_isa.h) and scalar versions give identical bytes,
// absmax and outputs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bnb/core/bf16_codes.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/dtype.h"

namespace bnb::core {

enum class Quant4 { kNF4, kFP4 };

inline constexpr int kCodebook4Size = 16;

// "nf4" or "fp4" (bitsandbytes' quant_type strings); otherwise an error naming the value and the accepted ones.
absl::StatusOr<Quant4> ParseQuant4(absl::string_view name);
absl::string_view Quant4Name(Quant4 q);

// The 16 values of a 4-bit type in code order, as float32, equal to bitsandbytes' get_4bit_type:
//   NF4: bitsandbytes' 16 normal-quantile values, -1.0 ... 1.0, ascending;
//   FP4: bitsandbytes' [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625, -8, -12, -4, -6, -2, -3], each divided by 12
//        in float32 (code 0 is +0, code 8 is -0).
const std::array<float, kCodebook4Size>& Code4(Quant4 q);

// A 4-bit codebook prepared for nearest-value search, by the rule of the 8-bit codebooks (codebook.h): the sorted
// position of v is the number of splits SplitPoint(sorted[i], sorted[i+1]) ("midpoints") strictly below v, so an
// exact tie goes to the lower value and NaN to the lowest; among equal values (FP4's +0 and -0) the lowest code wins.
struct Codebook4 {
  std::array<float, kCodebook4Size> values;               // Code4(q)
  std::array<float, kCodebook4Size - 1> midpoints;        // ascending
  std::array<uint8_t, kCodebook4Size> sorted_to_code;     // lowest code holding the i-th smallest value
  std::shared_ptr<const Bf16Codes> bf16_codes;            // codes of bfloat16 inputs by table (bf16_codes.h)
};
const Codebook4& GetCodebook4(Quant4 q);

// Number of midpoints strictly below v (a binary search: the midpoints are ascending).
inline int SortedPosition4(const Codebook4& cb, float v) {
  int pos = 0;
  for (int step = 8; step > 0; step >>= 1) {
    if (v > cb.midpoints[pos + step - 1]) pos += step;
  }
  return pos;
}

// The code of an already scaled value. The scalar definition the vector kernels match.
inline uint8_t NearestCode4(const Codebook4& cb, float v) { return cb.sorted_to_code[SortedPosition4(cb, v)]; }

// The last low nibble of an odd element count: the code of 0.0 (NF4 7, FP4 0).
inline uint8_t PadCode4(Quant4 q) { return NearestCode4(GetCodebook4(q), 0.0f); }

// Sets that nibble when the range ends the buffer and n is odd; the quantizers call it after packing with 0 there.
inline void PadOddEnd4(Quant4 q, const Blockwise8Range& r, uint8_t* packed) {
  if ((r.n & 1) != 0 && r.block_end * r.blocksize >= r.n) packed[r.n >> 1] |= PadCode4(q);
}

// Bytes holding n packed 4-bit codes.
inline int64_t PackedSize4(int64_t n) { return (n + 1) / 2; }

// The code of element i of a packed buffer.
inline uint8_t PackedCode4(const uint8_t* packed, int64_t i) {
  const uint8_t byte = packed[i >> 1];
  return (i & 1) ? byte & 0x0F : byte >> 4;
}

// Blocks [block_begin, block_end) of an n-element buffer; the 8-bit kernels' range, same rules.
using Blockwise4Range = Blockwise8Range;

// x: n elements of `dtype`. Writes absmax[block_begin ... block_end) and the packed bytes of those blocks,
// packed[block_begin * blocksize / 2 ...) up to byte PackedSize4(min(block_end * blocksize, n)) - 1.
void QuantizeBlockwise4(DType dtype, const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed,
                        float* absmax);
// out: n elements of `dtype`; out[i] = code16[code of i] * absmax[i / blocksize], computed in float32 and rounded to
// nearest even. code16 holds 16 values in code order: Code4(q).data() for the types above, or any other 4-bit map.
void DequantizeBlockwise4(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                          const Blockwise4Range& r, void* out);

// Plain scalar versions: the definition the vectorized ones are tested against.
void QuantizeBlockwise4Scalar(DType dtype, const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed,
                              float* absmax);
void DequantizeBlockwise4Scalar(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                                const Blockwise4Range& r, void* out);

}  // namespace bnb::core
