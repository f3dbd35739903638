// The 8-bit dequantize on AVX512-VBMI, for DequantizeBlockwise8's dispatch (blockwise8_hwy.cc): the codes' values
// (lookup256_x86.h) times absmax, for float32 outputs and 16-bit ones of blocks below 512, or a block's 16-bit
// outputs by byte-plane permutes from 512 on, where the Highway kernels look each up by a scalar load
// (tools/bench/NOTES.md, '8-bit dequantize by byte planes').
#pragma once

#include <cstdint>

#include "bnb/core/blockwise8.h"

namespace bnb::core::blockwise8_x86 {

// out = values[codes] * absmax over r's blocks, each product rounded to float32, as DequantizeBlockwise8; returns
// false, writing nothing, where the processor lacks AVX512-VBMI or the cpu.isa cap is below AVX-512.
bool DequantizeF32(const uint8_t* codes, const float* absmax, const float* values, const Blockwise8Range& r,
                   float* out);

// The same into bfloat16 or float16 outputs (dtype), each rounded as the Highway kernels round (false, writing
// nothing, for float32 outputs or without AVX512-VBMI); bfloat16 blocks below 512 by AVX512-BF16's conversion where
// the CPU has it and it rounds every product of the range alike.
bool Dequantize16(DType dtype, const uint8_t* codes, const float* absmax, const float* values,
                  const Blockwise8Range& r, void* out);

}  // namespace bnb::core::blockwise8_x86
