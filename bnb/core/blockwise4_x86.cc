// The 4-bit dequantize into 16-bit outputs on AVX-512 (blockwise4_x86.h), compiled with target attributes as
// gemv4_x86.cc's (which says why).
#include "bnb/core/blockwise4_x86.h"

#include <algorithm>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemv4_x86.h"  // BNB_GEMV4_X86
#include "bnb/core/round16_x86.h"
#include "bnb/core/stream_stores.h"
#include "hwy/targets.h"

#if BNB_GEMV4_X86
#include <immintrin.h>
#endif

namespace bnb::core::blockwise4_x86 {

#if BNB_GEMV4_X86
namespace {

#define BNB_TARGET_AVX512BW __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))

// A block's 16 outputs (code16 * absmax, rounded) as two byte planes, each in all four 128-bit lanes; then 64
// elements (32 packed bytes) per step. The bytes' dwords are ordered (L, L + 4) per lane before widening to words,
// so lane L holds elements 8L .. 8L + 7 and 32 + 8L .. 32 + 8L + 7; each word (high nibble: the even element)
// becomes the two elements' codes in order, two vpshufb look up the planes, and the within-lane unpacks then hold
// elements 0-31 and 32-63 in order.
template <DType kT, bool kStream>
BNB_TARGET_AVX512BW void Run(const uint8_t* packed, const float* absmax, const float* code16,
                             const Blockwise4Range& r, void* out) {
  const __m512 values = _mm512_loadu_ps(code16);
  const __m256i order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
  const __m512i low_nibble_up = _mm512_set1_epi16(0x0F00);
  char* o = static_cast<char*>(out);
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const __m512i h = round16_x86::Round16<kT>(_mm512_mul_ps(values, _mm512_set1_ps(absmax[b])));
    const __m512i lo = _mm512_broadcast_i32x4(_mm512_cvtepi32_epi8(h));
    const __m512i hi = _mm512_broadcast_i32x4(_mm512_cvtepi32_epi8(_mm512_srli_epi32(h, 8)));
    const int64_t begin = b * r.blocksize, end = std::min(begin + r.blocksize, r.n);
    int64_t i = begin;
    for (; i + 64 <= end; i += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(packed + (i + kCodesAhead) / 2), _MM_HINT_T0);
      const __m256i bytes = _mm256_permutevar8x32_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + i / 2)), order);
      const __m512i w = _mm512_cvtepu8_epi16(bytes);
      // (w >> 4) | ((w << 8) & 0x0F00): the even element's code in the low byte, the odd one's in the high byte.
      const __m512i codes = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), _mm512_slli_epi16(w, 8),
                                                      low_nibble_up, 0xF8);
      const __m512i l = _mm512_shuffle_epi8(lo, codes), u = _mm512_shuffle_epi8(hi, codes);
      auto* dst = reinterpret_cast<__m512i*>(o + 2 * i);
      if constexpr (kStream) {
        _mm512_stream_si512(dst, _mm512_unpacklo_epi8(l, u));
        _mm512_stream_si512(dst + 1, _mm512_unpackhi_epi8(l, u));
      } else {
        _mm512_storeu_si512(dst, _mm512_unpacklo_epi8(l, u));
        _mm512_storeu_si512(dst + 1, _mm512_unpackhi_epi8(l, u));
      }
    }
    if (i < end) {
      alignas(64) uint16_t table[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(table), _mm512_cvtepi32_epi16(h));
      for (; i < end; ++i) StoreElement<uint16_t>(out, i, table[PackedCode4(packed, i)]);
    }
  }
  if constexpr (kStream) _mm_sfence();
}

bool HasAvx512Bw() {
  static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}

}  // namespace
#endif

bool Dequantize16(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                  const Blockwise4Range& r, void* out) {
#if BNB_GEMV4_X86
  // Highway numbers better x86 targets with lower bits (the AVX-512 ones at or below HWY_AVX3).
  if (dtype == DType::kFloat32 || r.blocksize % 64 != 0 || ActiveTarget() > HWY_AVX3 || !HasAvx512Bw()) {
    return false;
  }
  const bool stream = StreamsOutput(out, r.n * 2 + (r.n + 1) / 2);
  round16_x86::Dispatch16(dtype, stream, [&](auto type, auto streamed) {
    Run<decltype(type)::value, decltype(streamed)::value>(packed, absmax, code16, r, out);
  });
  return true;
#else
  (void)dtype, (void)packed, (void)absmax, (void)code16, (void)r, (void)out;
  return false;
#endif
}

}  // namespace bnb::core::blockwise4_x86
