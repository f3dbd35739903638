#include "bnb/core/blockwise8_x86.h"

#include "bnb/core/cpu_isa.h"
#include "bnb/core/lookup256_x86.h"
#include "hwy/targets.h"

namespace bnb::core::blockwise8_x86 {

#if BNB_GEMV4_X86
namespace {

// Outputs this large are written by streaming stores, as the Highway kernels' (StreamableOutput).
constexpr int64_t kStreamFromBytes = int64_t{64} << 20;

template <bool kStream>
BNB_TARGET_AVX512VBMI void Run(const uint8_t* codes, const float* absmax, const float* values, const Blockwise8Range& r,
                               float* out) {
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
    for (int k = 0; k < 4; ++k) {
      const __m512 x = _mm512_mul_ps(v[k], _mm512_set1_ps(absmax[(i + 16 * k) >> shift]));
      if constexpr (kStream) {
        _mm512_stream_ps(out + i + 16 * k, x);
      } else {
        _mm512_storeu_ps(out + i + 16 * k, x);
      }
    }
  }
  for (; i < hi; ++i) out[i] = values[codes[i]] * absmax[i >> shift];
  if constexpr (kStream) _mm_sfence();
}

}  // namespace
#endif

bool DequantizeF32(const uint8_t* codes, const float* absmax, const float* values, const Blockwise8Range& r,
                   float* out) {
#if BNB_GEMV4_X86
  // Highway numbers better x86 targets with lower bits (the AVX-512 ones at or below HWY_AVX3).
  if (ActiveTarget() > HWY_AVX3 || !lookup256_x86::HasVbmi()) return false;
  const int64_t moved = r.n * 5;
  const bool stream = moved >= kStreamFromBytes && reinterpret_cast<uintptr_t>(out) % 64 == 0 &&
                      (r.block_begin * r.blocksize) % 16 == 0;
  if (stream) {
    Run<true>(codes, absmax, values, r, out);
  } else {
    Run<false>(codes, absmax, values, r, out);
  }
  return true;
#else
  (void)codes, (void)absmax, (void)values, (void)r, (void)out;
  return false;
#endif
}

}  // namespace bnb::core::blockwise8_x86
