// Vectorized blockwise 8-bit kernels, compiled once per instruction set by Highway and picked at run time.
// Every per-element rule (scaling, nearest code, rounding) is the scalar one of blockwise8.h / codebook.h; blocks
// whose absmax is 0, inf or NaN, and vector tails, take the scalar code path directly.
#include <algorithm>
#include <cmath>

#include "bnb/core/blockwise8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/blockwise8_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;

// x86 targets from AVX2 up have F16C, whose conversions round exactly as FloatToHalf does; elsewhere Highway
// 1.0's emulated narrowing is not round-to-nearest-even, so those targets narrow with the scalar routine.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3_ZEN4
constexpr bool kNativeHalf = true;
#else
constexpr bool kNativeHalf = false;
#endif

template <DType kT>
HWY_INLINE VF LoadF32(const void* base, int64_t i) {
  const DF df;
  if constexpr (kT == DType::kFloat32) {
    return hn::LoadU(df, static_cast<const float*>(base) + i);
  } else if constexpr (kT == DType::kBFloat16) {
    const DU32 du32;
    const auto bits = hn::PromoteTo(du32, hn::LoadU(DU16(), static_cast<const uint16_t*>(base) + i));
    return hn::BitCast(df, hn::ShiftLeft<16>(bits));
  } else if constexpr (kNativeHalf) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, static_cast<const hwy::float16_t*>(base) + i));
  } else {
    // Exact widening with integer ops (Highway 1.0's emulation mishandles some inputs).
    const DU32 du32;
    const auto h = hn::PromoteTo(du32, hn::LoadU(DU16(), static_cast<const uint16_t*>(base) + i));
    const auto em = hn::And(h, hn::Set(du32, 0x7FFF));
    const auto sign = hn::ShiftLeft<16>(hn::Xor(h, em));
    const auto normal = hn::Add(hn::ShiftLeft<13>(em), hn::Set(du32, 112u << 23));
    const auto inf_nan = hn::Or(hn::ShiftLeft<13>(em), hn::Set(du32, 0x7F800000u));
    const VF subnormal = hn::Mul(hn::ConvertTo(df, hn::BitCast(DI(), em)), hn::Set(df, 1.0f / 16777216.0f));
    const DI di;  // em fits in 15 bits: signed compares, which every target has
    const auto emi = hn::BitCast(di, em);
    auto bits = hn::IfThenElse(hn::RebindMask(du32, hn::Gt(emi, hn::Set(di, 0x7BFF))), inf_nan, normal);
    bits = hn::IfThenElse(hn::RebindMask(du32, hn::Lt(emi, hn::Set(di, 0x400))), hn::BitCast(du32, subnormal), bits);
    return hn::BitCast(df, hn::Or(bits, sign));
  }
}

template <DType kT>
HWY_INLINE void StoreF32(VF v, void* base, int64_t i) {
  const DF df;
  if constexpr (kT == DType::kFloat32) {
    hn::StoreU(v, df, static_cast<float*>(base) + i);
  } else if constexpr (kT == DType::kBFloat16) {
    const DU32 du32;
    const DI di;
    const auto bits = hn::BitCast(du32, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 1));
    auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du32, 0x7FFF), lsb)));
    rounded = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), hn::Set(du32, 0x7FC0), rounded);
    hn::StoreU(hn::DemoteTo(DU16(), hn::BitCast(di, rounded)), DU16(), static_cast<uint16_t*>(base) + i);
  } else if constexpr (kNativeHalf) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, static_cast<hwy::float16_t*>(base) + i);
  } else {
    HWY_ALIGN float tmp[hn::MaxLanes(df)];
    hn::Store(v, df, tmp);
    for (size_t k = 0; k < hn::Lanes(df); ++k) StoreFromFloat(DType::kFloat16, base, i + k, tmp[k]);
  }
}

// Codes of N scaled values in [-1, 1], by PreparedCodebook's bucket table: one gather and integer compares.
// Codebooks whose table has buckets marked for search (never the dynamic map) check for them and redo those
// vectors with the scalar binary search.
HWY_INLINE void StoreCodes(const PreparedCodebook& cb, VF v, uint8_t* out) {
  using P = PreparedCodebook;
  const DI di;
  const DU32 du32;
  const auto bits = hn::BitCast(du32, v);
  const auto bucket = hn::BitCast(di, hn::ShiftRight<P::kBucketShift>(bits));  // logical: the sign lands on bit 16
  const auto key = hn::BitCast(di, hn::And(bits, hn::Set(du32, P::kKeyMask)));
  const auto e = hn::GatherIndex(di, cb.buckets.data(), bucket);
  const auto byte = hn::Set(di, 0xFF);  // the shifts are arithmetic: mask off the sign
  const auto threshold = hn::And(e, hn::Set(di, 0xFFFF));
  const auto high = hn::Gt(key, hn::Sub(threshold, hn::Set(di, 1)));  // key >= threshold
  const auto code = hn::IfThenElse(high, hn::And(hn::ShiftRight<24>(e), byte), hn::And(hn::ShiftRight<16>(e), byte));
  hn::StoreU(hn::DemoteTo(DU8(), code), DU8(), out);
  if (HWY_UNLIKELY(cb.needs_search) && !hn::AllFalse(di, hn::Eq(threshold, hn::Set(di, P::kSearch)))) {
    HWY_ALIGN float vs[hn::MaxLanes(DF())];
    hn::Store(v, DF(), vs);
    for (size_t j = 0; j < hn::Lanes(di); ++j) out[j] = NearestCode(cb, vs[j]);
  }
}

template <DType kT>
void QuantizeT(const void* x, const PreparedCodebook& cb, const Blockwise8Range& r, uint8_t* codes,
               float* absmax) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const int64_t vec_end = lo + (hi - lo) / N * N;

    VF vmax = hn::Zero(df);
    VF nan = hn::Zero(df);  // all-ones lanes where a NaN was seen
    for (int64_t i = lo; i < vec_end; i += N) {
      const VF v = LoadF32<kT>(x, i);
      nan = hn::Or(nan, hn::VecFromMask(df, hn::IsNaN(v)));
      vmax = hn::Max(vmax, hn::Abs(v));
    }
    float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    bool any_nan = !hn::AllFalse(df, hn::MaskFromVec(nan));
    for (int64_t i = vec_end; i < hi; ++i) {
      const float v = LoadAsFloat(kT, x, i);
      any_nan |= std::isnan(v);
      amax = std::max(amax, std::fabs(v));
    }
    if (any_nan) amax = NAN;
    absmax[b] = amax;

    int64_t i = lo;
    if (std::isfinite(amax) && amax != 0.0f) {
      const VF vscale = hn::Set(df, amax);
      // Four vectors per step: their gathers and divisions are independent, so they overlap.
      for (; i + 4 * N <= vec_end; i += 4 * N) {
        const VF v0 = hn::Div(LoadF32<kT>(x, i), vscale);
        const VF v1 = hn::Div(LoadF32<kT>(x, i + N), vscale);
        const VF v2 = hn::Div(LoadF32<kT>(x, i + 2 * N), vscale);
        const VF v3 = hn::Div(LoadF32<kT>(x, i + 3 * N), vscale);
        StoreCodes(cb, v0, codes + i);
        StoreCodes(cb, v1, codes + i + N);
        StoreCodes(cb, v2, codes + i + 2 * N);
        StoreCodes(cb, v3, codes + i + 3 * N);
      }
      for (; i < vec_end; i += N) StoreCodes(cb, hn::Div(LoadF32<kT>(x, i), vscale), codes + i);
    }
    for (; i < hi; ++i) codes[i] = NearestCode(cb, ScaleToUnit(LoadAsFloat(kT, x, i), amax));
  }
}

template <DType kT>
void DequantizeT(const uint8_t* codes, const float* absmax, const float* code_values, const Blockwise8Range& r,
                 void* out) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const int64_t vec_end = lo + (hi - lo) / N * N;
    const VF scale = hn::Set(df, absmax[b]);
    for (int64_t i = lo; i < vec_end; i += N) {
      const auto idx = hn::PromoteTo(di, hn::LoadU(DU8(), codes + i));
      StoreF32<kT>(hn::Mul(hn::GatherIndex(df, code_values, idx), scale), out, i);
    }
    for (int64_t i = vec_end; i < hi; ++i) StoreFromFloat(kT, out, i, code_values[codes[i]] * absmax[b]);
  }
}

void Quantize(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r, uint8_t* codes,
              float* absmax) {
  switch (dtype) {
    case DType::kFloat32: return QuantizeT<DType::kFloat32>(x, cb, r, codes, absmax);
    case DType::kFloat16: return QuantizeT<DType::kFloat16>(x, cb, r, codes, absmax);
    case DType::kBFloat16: return QuantizeT<DType::kBFloat16>(x, cb, r, codes, absmax);
  }
}

void Dequantize(DType dtype, const uint8_t* codes, const float* absmax, const float* code_values,
                const Blockwise8Range& r, void* out) {
  switch (dtype) {
    case DType::kFloat32: return DequantizeT<DType::kFloat32>(codes, absmax, code_values, r, out);
    case DType::kFloat16: return DequantizeT<DType::kFloat16>(codes, absmax, code_values, r, out);
    case DType::kBFloat16: return DequantizeT<DType::kBFloat16>(codes, absmax, code_values, r, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(Quantize);
HWY_EXPORT(Dequantize);

void QuantizeBlockwise8(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r,
                        uint8_t* codes, float* absmax) {
  HWY_DYNAMIC_DISPATCH(Quantize)(dtype, x, cb, r, codes, absmax);
}

void DequantizeBlockwise8(DType dtype, const uint8_t* codes, const float* absmax, const float* code_values,
                          const Blockwise8Range& r, void* out) {
  HWY_DYNAMIC_DISPATCH(Dequantize)(dtype, codes, absmax, code_values, r, out);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
