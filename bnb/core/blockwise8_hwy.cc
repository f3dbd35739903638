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
#include "bnb/core/hwy_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

    const float amax = BlockAbsmax<kT>(x, lo, hi);
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

// Lanes(DF) code values for the codes at `codes`, as floats.
HWY_INLINE VF CodeValues(const PreparedCodebook& cb, const uint8_t* codes) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(df, cb.values[codes[0]]);
#else
  // Pairs of codes index PreparedCodebook::pairs: half as many gathered lanes (20% faster on Zen 3).
  using D64 = hn::Repartition<uint64_t, DF>;
  const D64 d64;
  const auto pair_codes = hn::LoadU(hn::Rebind<uint16_t, D64>(), reinterpret_cast<const uint16_t*>(codes));
  const auto index = hn::PromoteTo(d64, hn::PromoteTo(hn::Rebind<uint32_t, D64>(), pair_codes));
  return hn::BitCast(df, hn::GatherIndex(d64, cb.pairs.data(), hn::BitCast(hn::RebindToSigned<D64>(), index)));
#endif
}

template <DType kT>
void DequantizeT(const uint8_t* codes, const float* absmax, const PreparedCodebook& cb, const Blockwise8Range& r,
                 void* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const int64_t vec_end = lo + (hi - lo) / N * N;
    const VF scale = hn::Set(df, absmax[b]);
    int64_t i = lo;
    for (; i + 2 * N <= vec_end; i += 2 * N) {  // two gathers in flight
      const VF v0 = CodeValues(cb, codes + i);
      const VF v1 = CodeValues(cb, codes + i + N);
      StoreF32<kT>(hn::Mul(v0, scale), out, i);
      StoreF32<kT>(hn::Mul(v1, scale), out, i + N);
    }
    for (; i < vec_end; i += N) StoreF32<kT>(hn::Mul(CodeValues(cb, codes + i), scale), out, i);
    for (; i < hi; ++i) StoreFromFloat(kT, out, i, cb.values[codes[i]] * absmax[b]);
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

void Dequantize(DType dtype, const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                const Blockwise8Range& r, void* out) {
  switch (dtype) {
    case DType::kFloat32: return DequantizeT<DType::kFloat32>(codes, absmax, cb, r, out);
    case DType::kFloat16: return DequantizeT<DType::kFloat16>(codes, absmax, cb, r, out);
    case DType::kBFloat16: return DequantizeT<DType::kBFloat16>(codes, absmax, cb, r, out);
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

void DequantizeBlockwise8(DType dtype, const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                          const Blockwise8Range& r, void* out) {
  HWY_DYNAMIC_DISPATCH(Dequantize)(dtype, codes, absmax, cb, r, out);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
