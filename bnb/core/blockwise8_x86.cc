#include "bnb/core/blockwise8_x86.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/dtype.h"
#include "bnb/core/gemv4_x86.h"
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

// Run's attribute: AVX512-VBMI, and AVX512-BF16 for its kNative instantiations, the only ones that emit a BF16
// instruction (vcvtne2ps2bf16, by intrinsic); they run where HasAvx512Bf16() alone.
#define BNB_TARGET_AVX512VBMI_BF16 \
  __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16")))

// Stores x's lanes, then y's, at out + i: 32 float32 outputs, or 32 16-bit ones rounded as Round16 rounds them.
// float16: Round16's vcvtps2ph on each, the halves joined (where widening and interleaving them took two more
// instructions). bfloat16: Round16 (seven instructions a vector), or, kNative, vcvtne2ps2bf16 for both, equal to it
// for lanes that are zero, normal or infinite (it reads and writes subnormals as zeros, and keeps a NaN's sign and
// payload where Round16 writes 0x7FC0): NativeRoundingExact says where a range's products are all such.
template <DType kOut, bool kStream, bool kNative>
BNB_TARGET_AVX512VBMI_BF16 inline void Store(void* out, int64_t i, __m512 x, __m512 y) {
  if constexpr (kOut == DType::kFloat32) {
    float* dst = static_cast<float*>(out) + i;
    kStream ? _mm512_stream_ps(dst, x) : _mm512_storeu_ps(dst, x);
    kStream ? _mm512_stream_ps(dst + 16, y) : _mm512_storeu_ps(dst + 16, y);
  } else {
    __m512i h;
    if constexpr (kOut == DType::kFloat16) {
      constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(x, kRound)), _mm512_cvtps_ph(y, kRound), 1);
    } else if constexpr (kNative) {
      h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y, x));  // x's lanes low, y's high
    } else {
      // Each lane's low 16 bits, x's then y's: words 0, 2, .., 62 of the pair.
      const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                            26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
      h = _mm512_permutex2var_epi16(round16_x86::Round16<kOut>(x), even, round16_x86::Round16<kOut>(y));
    }
    auto* dst = reinterpret_cast<__m512i*>(static_cast<uint16_t*>(out) + i);
    kStream ? _mm512_stream_si512(dst, h) : _mm512_storeu_si512(dst, h);
  }
}

// out[i] = values[codes[i]] * absmax[block of i] in float32, stored as kOut (16-bit: rounded by Round16, as the
// Highway kernels round, or kNative, as Store says). kStream: out + first element 64-byte aligned.
template <DType kOut, bool kStream, bool kNative = false>
BNB_TARGET_AVX512VBMI_BF16 void Run(const uint8_t* codes, const float* absmax, const float* values,
                                    const Blockwise8Range& r, void* out) {
  const lookup256_x86::Lookup256 lookup(values);
  int shift = 0;
  while ((int64_t{1} << shift) < r.blocksize) ++shift;
  const int64_t lo = r.block_begin * r.blocksize;
  const int64_t hi = r.block_end * r.blocksize < r.n ? r.block_end * r.blocksize : r.n;
  int64_t i = lo;
  // 64 codes at a time; each 16 lie in one block (blocks are 32 or more long and start at multiples of 16).
  for (; i + 64 <= hi; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(codes + i + kCodesAhead), _MM_HINT_T0);
    __m512 v[4];
    lookup.Get(codes + i, v);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) v[k] = _mm512_mul_ps(v[k], _mm512_set1_ps(absmax[(i + 16 * k) >> shift]));
    Store<kOut, kStream, kNative>(out, i, v[0], v[1]);
    Store<kOut, kStream, kNative>(out, i + 32, v[2], v[3]);
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
      _mm_prefetch(reinterpret_cast<const char*>(codes + i + kCodesAhead), _MM_HINT_T0);
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

// Whether every product values[c] * absmax[b] of r's blocks is zero, normal or infinite, so vcvtne2ps2bf16 rounds
// each as Round16 does: each absmax finite and zero, or with |absmax| times the least nonzero |value| normal (a
// product's magnitude is at least that, rounded). values are finite (PrepareCodebook's rule).
bool NativeRoundingExact(const float* absmax, const float* values, const Blockwise8Range& r) {
  float least = std::numeric_limits<float>::infinity();
  for (int k = 0; k < 256; ++k) {
    if (values[k] != 0.0f) least = std::min(least, std::fabs(values[k]));
  }
  bool exact = true;
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const float a = std::fabs(absmax[b]);
    exact &= std::isfinite(a) && (a == 0.0f || a * least >= std::numeric_limits<float>::min());
  }
  return exact;
}

}  // namespace
#endif

bool Dequantize16(DType dtype, const uint8_t* codes, const float* absmax, const float* values,
                  const Blockwise8Range& r, void* out) {
#if BNB_GEMV4_X86
  if (dtype == DType::kFloat32 || !Allowed()) return false;
  if (r.blocksize < kTableFrom) {
    // Run streams from its first element on: 64-byte aligned where that is a multiple of 32 elements.
    const bool stream = StreamsOutput(out, r.n * 3) && (r.block_begin * r.blocksize) % 32 == 0;
    if (dtype == DType::kBFloat16 && gemv4_x86::HasAvx512Bf16() && NativeRoundingExact(absmax, values, r)) {
      stream ? Run<DType::kBFloat16, true, true>(codes, absmax, values, r, out)
             : Run<DType::kBFloat16, false, true>(codes, absmax, values, r, out);
      return true;
    }
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
