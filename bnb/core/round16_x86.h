// For the AVX-512 kernels that write bfloat16 or float16 (blockwise8_x86.cc, blockwise4_x86.cc): float32 lanes
// rounded as the Highway kernels' StoreF32 rounds them (Round16 carries its target attribute, so it inlines only
// into callers compiled for AVX-512 BW, VL, DQ or more), and the dispatch to a kernel's template arguments.
#pragma once

#include "bnb/core/dtype.h"
#include "bnb/core/gemv4_x86.h"  // BNB_GEMV4_X86: x86 with GCC or clang

#if BNB_GEMV4_X86
#include <immintrin.h>

#include <type_traits>

namespace bnb::core::round16_x86 {

// Each lane's 16-bit output in its low 16 bits: bfloat16 to nearest even (NaN: 0x7FC0, as FloatToBF16), float16 by
// vcvtps2ph to nearest even (what Highway's DemoteTo emits on these targets).
template <DType kT>
__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512i Round16(__m512 x) {
  static_assert(kT == DType::kBFloat16 || kT == DType::kFloat16, "16-bit outputs");
  if constexpr (kT == DType::kBFloat16) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    return _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  } else {
    return _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// f(std::integral_constant<DType, kT>{}, std::bool_constant<kStream>{}) for a 16-bit dtype and a streaming flag
// known at run time: a kernel's template arguments.
template <class F>
inline void Dispatch16(DType dtype, bool stream, const F& f) {
  const auto with = [&](auto type) { stream ? f(type, std::true_type{}) : f(type, std::false_type{}); };
  if (dtype == DType::kBFloat16) {
    with(std::integral_constant<DType, DType::kBFloat16>{});
  } else {
    with(std::integral_constant<DType, DType::kFloat16>{});
  }
}

}  // namespace bnb::core::round16_x86
#endif  // BNB_GEMV4_X86
