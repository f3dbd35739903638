#include "bnb/core/blockwise8_x86.h"

#include <algorithm>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/dtype.h"
#include "bnb/core/lookup256_x86.h"
#include "bnb/core/round16_x86.h"
#include "bnb/core/stream_stores.h"
#include "hwy/targets.h"

namespace bnb::core::blockwise8_x86 {

#if BNB_GEMV4_X86
namespace {

// 16-bit outputs by per-block tables from this blocksize on (below, a table's 256 entries cost more than they save,
// and Run's float32 lookup, product and rounding take them).
constexpr int64_t kTableFrom = 512;

// Stores x's lanes, then y's, at out + i: 32 float32 outputs, or 32 16-bit ones rounded by Round16.
template <DType kOut, bool kStream>
BNB_TARGET_AVX512VBMI inline void Store(void* out, int64_t i, __m512 x, __m512 y) {
  if constexpr (kOut == DType::kFloat32) {
    float* dst = static_cast<float*>(out) + i;
    kStream ? _mm512_stream_ps(dst, x) : _mm512_storeu_ps(dst, x);
    kStream ? _mm512_stream_ps(dst + 16, y) : _mm512_storeu_ps(dst + 16, y);
  } else {
    // Each lane's low 16 bits, x's then y's: words 0, 2, .., 62 of the pair.
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                          26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i h = _mm512_permutex2var_epi16(round16_x86::Round16<kOut>(x), even, round16_x86::Round16<kOut>(y));
    auto* dst = reinterpret_cast<__m512i*>(static_cast<uint16_t*>(out) + i);
    kStream ? _mm512_stream_si512(dst, h) : _mm512_storeu_si512(dst, h);
  }
}

// out[i] = values[codes[i]] * absmax[block of i] in float32, stored as kOut (16-bit: rounded by Round16, as the
// Highway kernels round). kStream: out + first element 64-byte aligned.
template <DType kOut, bool kStream>
BNB_TARGET_AVX512VBMI void Run(const uint8_t* codes, const float* absmax, const float* values, const Blockwise8Range& r,
                               void* out) {
  const lookup256_x86::Lookup256 lookup(values);
  int shift = 0;
  while ((int64_t{1} << shift) < r.blocksize) ++shift;
  const int64_t lo = r.block_begin * r.blocksize;
  const int64_t hi = r.block_end * r.blocksize < r.n ? r.block_end * r.blocksize : r.n;
  int64_t i = lo;
  // 64 codes at a time; each 16 lie in one block (blocks are 32 or more long and start at multiples of 16).
  for (; i + 64 <= hi; i += 64) {
    __m512 v[4];
    lookup.Get(codes + i, v);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) v[k] = _mm512_mul_ps(v[k], _mm512_set1_ps(absmax[(i + 16 * k) >> shift]));
    Store<kOut, kStream>(out, i, v[0], v[1]);
    Store<kOut, kStream>(out, i + 32, v[2], v[3]);
  }
  for (; i < hi; ++i) StoreFromFloat(kOut, out, i, values[codes[i]] * absmax[i >> shift]);
  if constexpr (kStream) _mm_sfence();
}

// 16-bit outputs, a block at a time: its 256 possible outputs (values * absmax, rounded by Round16) as two byte
// planes (low and high bytes, each two register pairs), then 64 codes per step: each plane's byte by two 128-entry
// byte permutes and a blend on the code's top bit, the planes interleaved by unpacks. The unpacks interleave within
// 128-bit lanes, so the codes' qwords are first ordered (L, L + 4) per lane: the low unpack then holds codes 0-31
// in order, the high one 32-63.
template <DType kT, bool kStream>
BNB_TARGET_AVX512VBMI void Run16(const uint8_t* codes, const float* absmax, const float* values,
                                 const Blockwise8Range& r, void* out) {
  const __m512i order = _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0);
  alignas(64) uint8_t planes[2][256];
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const __m512 scale = _mm512_set1_ps(absmax[b]);
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      const __m512i h = round16_x86::Round16<kT>(_mm512_mul_ps(_mm512_loadu_ps(values + 16 * k), scale));
      _mm_store_si128(reinterpret_cast<__m128i*>(planes[0] + 16 * k), _mm512_cvtepi32_epi8(h));
      _mm_store_si128(reinterpret_cast<__m128i*>(planes[1] + 16 * k), _mm512_cvtepi32_epi8(_mm512_srli_epi32(h, 8)));
    }
    __m512i lo[4], hi[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      lo[q] = _mm512_load_si512(planes[0] + 64 * q);
      hi[q] = _mm512_load_si512(planes[1] + 64 * q);
    }
    const int64_t begin = b * r.blocksize, end = std::min(begin + r.blocksize, r.n);
    int64_t i = begin;
    for (; i + 64 <= end; i += 64) {
      const __m512i c = _mm512_permutexvar_epi64(order, _mm512_loadu_si512(codes + i));
      const __mmask64 top = _mm512_movepi8_mask(c);
      const __m512i l = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo[0], c, lo[1]),
                                               _mm512_permutex2var_epi8(lo[2], c, lo[3]));
      const __m512i h = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi[0], c, hi[1]),
                                               _mm512_permutex2var_epi8(hi[2], c, hi[3]));
      auto* dst = reinterpret_cast<__m512i*>(static_cast<char*>(out) + 2 * i);
      if constexpr (kStream) {
        _mm512_stream_si512(dst, _mm512_unpacklo_epi8(l, h));
        _mm512_stream_si512(dst + 1, _mm512_unpackhi_epi8(l, h));
      } else {
        _mm512_storeu_si512(dst, _mm512_unpacklo_epi8(l, h));
        _mm512_storeu_si512(dst + 1, _mm512_unpackhi_epi8(l, h));
      }
    }
    for (; i < end; ++i) {
      StoreElement<uint16_t>(out, i, static_cast<uint16_t>(planes[0][codes[i]] | planes[1][codes[i]] << 8));
    }
  }
  if constexpr (kStream) _mm_sfence();
}

// Whether the processor and the cpu.isa cap allow these kernels.
bool Allowed() { return ActiveTarget() <= HWY_AVX3 && lookup256_x86::HasVbmi(); }

}  // namespace
#endif

bool Dequantize16(DType dtype, const uint8_t* codes, const float* absmax, const float* values,
                  const Blockwise8Range& r, void* out) {
#if BNB_GEMV4_X86
  if (dtype == DType::kFloat32 || !Allowed()) return false;
  if (r.blocksize < kTableFrom) {
    // Run streams from its first element on: 64-byte aligned where that is a multiple of 32 elements.
    const bool stream = StreamsOutput(out, r.n * 3) && (r.block_begin * r.blocksize) % 32 == 0;
    round16_x86::Dispatch16(dtype, stream, [&](auto type, auto streamed) {
      Run<decltype(type)::value, decltype(streamed)::value>(codes, absmax, values, r, out);
    });
    return true;
  }
  const bool stream = StreamsOutput(out, r.n * 3);
  round16_x86::Dispatch16(dtype, stream, [&](auto type, auto streamed) {
    Run16<decltype(type)::value, decltype(streamed)::value>(codes, absmax, values, r, out);
  });
  return true;
#else
  (void)dtype, (void)codes, (void)absmax, (void)values, (void)r, (void)out;
  return false;
#endif
}

bool DequantizeF32(const uint8_t* codes, const float* absmax, const float* values, const Blockwise8Range& r,
                   float* out) {
#if BNB_GEMV4_X86
  if (!Allowed()) return false;
  const int64_t moved = r.n * 5;
  const bool stream = StreamsOutput(out, moved) && (r.block_begin * r.blocksize) % 16 == 0;
  if (stream) {
    Run<DType::kFloat32, true>(codes, absmax, values, r, out);
  } else {
    Run<DType::kFloat32, false>(codes, absmax, values, r, out);
  }
  return true;
#else
  (void)codes, (void)absmax, (void)values, (void)r, (void)out;
  return false;
#endif
}

}  // namespace bnb::core::blockwise8_x86
