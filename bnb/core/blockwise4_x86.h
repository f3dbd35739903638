// The 4-bit dequantize into bfloat16 / float16 on AVX-512 (BW), for DequantizeBlockwise4's dispatch
// (blockwise4_hwy.cc): 64 elements per step by full-width byte shuffles, where the Highway kernel's byte planes
// take 16 (tools/bench/NOTES.md, '4-bit dequantize, 16-bit outputs on AVX-512').
#pragma once

#include <cstdint>

#include "bnb/core/blockwise4.h"
#include "bnb/core/dtype.h"

namespace bnb::core::blockwise4_x86 {

// out = code16[code] * absmax of each element over r's blocks, rounded to dtype (bfloat16 or float16) as the Highway
// kernels round; returns false, writing nothing, for float32 outputs, blocks not a multiple of 64 long, or where
// the processor lacks AVX-512 BW or the cpu.isa cap is below AVX-512.
bool Dequantize16(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                  const Blockwise4Range& r, void* out);

}  // namespace bnb::core::blockwise4_x86
