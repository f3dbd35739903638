// A 256-entry float32 table looked up 64 codes at a time by AVX512-VBMI byte permutes: the nested statistics of
// gemv/gemm_4bit (gemv4_x86.cc) and the float32 8-bit dequantize (blockwise8_x86.cc). Functions carry their target
// attribute, so they inline only into callers compiled for AVX512-VBMI; callers check HasVbmi() and the cpu.isa cap.
#pragma once

#include "bnb/core/gemv4_x86.h"  // BNB_GEMV4_X86: x86 with GCC or clang

#if BNB_GEMV4_X86
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define BNB_TARGET_AVX512VBMI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

namespace bnb::core::lookup256_x86 {

// Whether the processor has AVX512-VBMI (and BW, VL, DQ); CPUID only.
inline bool HasVbmi() {
  static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi");
  return has;
}

// 64 codes' values from a 256-float table without gathers (AVX512-VBMI): byte j of every entry is plane j, four
// register pairs each (entries 0-127, 128-255); a code's byte j is two 128-entry byte permutes (vpermi2b) and a
// blend on its top bit, and unpacking the four planes' bytes gives the floats. The unpacks interleave within 128-bit
// lanes, so the codes' dwords are first transposed 4 x 4 (vpermd): output vector k then holds codes 16k .. 16k + 15
// in order. Gathers of 16 floats ran about 4x slower (tools/bench/NOTES.md, 'Nested statistics by byte planes').
struct Lookup256 {
  __m512i plane[4][4];

  BNB_TARGET_AVX512VBMI explicit Lookup256(const float* table) {
    alignas(64) uint8_t bytes[4][256];
    for (int i = 0; i < 256; ++i) {
      uint32_t bits;
      std::memcpy(&bits, table + i, sizeof(bits));
      for (int j = 0; j < 4; ++j) bytes[j][i] = static_cast<uint8_t>(bits >> (8 * j));
    }
    for (int j = 0; j < 4; ++j) {
      for (int r = 0; r < 4; ++r) plane[j][r] = _mm512_load_si512(bytes[j] + 64 * r);
    }
  }

  BNB_TARGET_AVX512VBMI inline void Get(const uint8_t* codes, __m512 (&out)[4]) const {
    const __m512i transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i idx = _mm512_permutexvar_epi32(transpose, _mm512_loadu_si512(codes));
    const __mmask64 high = _mm512_movepi8_mask(idx);
    __m512i p[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      p[j] = _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(plane[j][0], idx, plane[j][1]),
                                    _mm512_permutex2var_epi8(plane[j][2], idx, plane[j][3]));
    }
    const __m512i t0 = _mm512_unpacklo_epi8(p[0], p[1]), t1 = _mm512_unpackhi_epi8(p[0], p[1]);
    const __m512i t2 = _mm512_unpacklo_epi8(p[2], p[3]), t3 = _mm512_unpackhi_epi8(p[2], p[3]);
    out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(t0, t2));
    out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(t0, t2));
    out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(t1, t3));
    out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(t1, t3));
  }
};

}  // namespace bnb::core::lookup256_x86
#endif  // BNB_GEMV4_X86
