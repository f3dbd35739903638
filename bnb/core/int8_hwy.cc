// Vectorized LLM.int8() passes (int8.h), compiled once per instruction set by Highway and picked at run time. Each
// row is its K elements a vector at a time, the last ones by the scalar rule; every per-element rule is the scalar
// definition's (int8_scalar.cc).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "bnb/core/int8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/int8_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DI8 = hn::Rebind<int8_t, DF>;

// The magnitude bits of each lane (0 for outliers): as int32 they order magnitudes, NaN above +inf.
HWY_INLINE VI MagnitudeBits(VF v, VF threshold, bool find_outliers) {
  const DI di;
  const VI bits = hn::And(hn::BitCast(di, v), hn::Set(di, 0x7FFFFFFF));
  if (!find_outliers) return bits;
  return hn::IfThenZeroElse(hn::RebindMask(di, hn::Ge(hn::Abs(v), threshold)), bits);
}

HWY_INLINE bool Usable(float absmax) { return std::isfinite(absmax) && absmax > 0.0f; }

// Codes of q (already scaled): round half to even, clamp to [-127, 127], narrow to int8.
HWY_INLINE void StoreCodes(VF q, int8_t* out) {
  const DF df;
  const VF clamped = hn::Min(hn::Max(hn::Round(q), hn::Set(df, -127.0f)), hn::Set(df, 127.0f));
  hn::StoreU(hn::DemoteTo(DI8(), hn::ConvertTo(DI(), clamped)), DI8(), out);
}

template <DType kT>
void OutlierColumnsT(const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, uint8_t* out_flags) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF t = hn::Set(df, threshold);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = 0;
    for (; k + N <= K; k += N) {
      const auto found = hn::RebindMask(di, hn::Ge(hn::Abs(LoadF32<kT>(x, r * K + k)), t));
      const auto flags = hn::DemoteTo(DU8(), hn::IfThenElseZero(found, hn::Set(di, 1)));
      hn::StoreU(hn::Or(hn::LoadU(DU8(), out_flags + k), flags), DU8(), out_flags + k);
    }
    for (; k < K; ++k) out_flags[k] |= std::fabs(LoadAsFloat(kT, x, r * K + k)) >= threshold;
  }
}

template <DType kT>
void QuantizeRowsT(const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, int8_t* codes,
                   float* row_stats) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF t = hn::Set(df, threshold);
  const bool find = threshold > 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t base = r * K;
    VI vmax = hn::Zero(di);
    int64_t k = 0;
    for (; k + N <= K; k += N) vmax = hn::Max(vmax, MagnitudeBits(LoadF32<kT>(x, base + k), t, find));
    int32_t bits = hn::GetLane(hn::MaxOfLanes(di, vmax));
    for (; k < K; ++k) {
      const float v = LoadAsFloat(kT, x, base + k);
      if (!(find && std::fabs(v) >= threshold)) bits = std::max(bits, static_cast<int32_t>(FloatToBits(v) & 0x7FFFFFFFu));
    }
    const float absmax = BitsToFloat(static_cast<uint32_t>(bits));
    row_stats[r] = absmax;
    int8_t* out = codes + base;
    if (!Usable(absmax)) {
      std::memset(out, 0, static_cast<size_t>(K));
      continue;
    }
    const float scale = 127.0f / absmax;
    const VF vscale = hn::Set(df, scale);
    for (k = 0; k + N <= K; k += N) StoreCodes(hn::Mul(LoadF32<kT>(x, base + k), vscale), out + k);
    for (; k < K; ++k) {
      out[k] = static_cast<int8_t>(std::clamp(std::nearbyint(LoadAsFloat(kT, x, base + k) * scale), -127.0f, 127.0f));
    }
  }
}

template <DType kT>
void ColumnAbsmaxT(const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, float* col_absmax) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF t = hn::Set(df, threshold);
  const bool find = threshold > 0.0f;
  int32_t* cols = reinterpret_cast<int32_t*>(col_absmax);  // the floats' bits, as int32 max orders them
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = 0;
    for (; k + N <= K; k += N) {
      const VI bits = MagnitudeBits(LoadF32<kT>(x, r * K + k), t, find);
      hn::StoreU(hn::Max(hn::LoadU(di, cols + k), bits), di, cols + k);
    }
    for (; k < K; ++k) {
      const float v = LoadAsFloat(kT, x, r * K + k);
      if (!(find && std::fabs(v) >= threshold)) {
        cols[k] = std::max(cols[k], static_cast<int32_t>(FloatToBits(v) & 0x7FFFFFFFu));
      }
    }
  }
}

template <DType kT>
void QuantizeColumnsT(const void* x, int64_t K, float threshold, const float* col_absmax, int64_t r0, int64_t r1,
                      int8_t* codes) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF t = hn::Set(df, threshold), v127 = hn::Set(df, 127.0f), zero = hn::Zero(df);
  const bool find = threshold > 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = 0;
    for (; k + N <= K; k += N) {
      VF v = LoadF32<kT>(x, r * K + k);
      if (find) v = hn::IfThenZeroElse(hn::Ge(hn::Abs(v), t), v);
      const VF absmax = hn::LoadU(df, col_absmax + k);
      const auto usable = hn::And(hn::Gt(absmax, zero), hn::Lt(absmax, hn::Set(df, INFINITY)));  // false for NaN
      StoreCodes(hn::IfThenElseZero(usable, hn::Div(hn::Mul(v, v127), absmax)), codes + r * K + k);
    }
    for (; k < K; ++k) {
      const float raw = LoadAsFloat(kT, x, r * K + k);
      const float v = find && std::fabs(raw) >= threshold ? 0.0f : raw;
      codes[r * K + k] = Usable(col_absmax[k])
                             ? static_cast<int8_t>(std::clamp(std::nearbyint((v * 127.0f) / col_absmax[k]),
                                                              -127.0f, 127.0f))
                             : 0;
    }
  }
}

void OutlierColumns(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                    uint8_t* out_flags) {
  switch (dtype) {
    case DType::kFloat32: return OutlierColumnsT<DType::kFloat32>(x, K, threshold, r0, r1, out_flags);
    case DType::kFloat16: return OutlierColumnsT<DType::kFloat16>(x, K, threshold, r0, r1, out_flags);
    case DType::kBFloat16: return OutlierColumnsT<DType::kBFloat16>(x, K, threshold, r0, r1, out_flags);
  }
}

void QuantizeRows(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, int8_t* codes,
                  float* row_stats) {
  switch (dtype) {
    case DType::kFloat32: return QuantizeRowsT<DType::kFloat32>(x, K, threshold, r0, r1, codes, row_stats);
    case DType::kFloat16: return QuantizeRowsT<DType::kFloat16>(x, K, threshold, r0, r1, codes, row_stats);
    case DType::kBFloat16: return QuantizeRowsT<DType::kBFloat16>(x, K, threshold, r0, r1, codes, row_stats);
  }
}

void ColumnAbsmax(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                  float* col_absmax) {
  switch (dtype) {
    case DType::kFloat32: return ColumnAbsmaxT<DType::kFloat32>(x, K, threshold, r0, r1, col_absmax);
    case DType::kFloat16: return ColumnAbsmaxT<DType::kFloat16>(x, K, threshold, r0, r1, col_absmax);
    case DType::kBFloat16: return ColumnAbsmaxT<DType::kBFloat16>(x, K, threshold, r0, r1, col_absmax);
  }
}

void QuantizeColumns(DType dtype, const void* x, int64_t K, float threshold, const float* col_absmax, int64_t r0,
                     int64_t r1, int8_t* codes) {
  switch (dtype) {
    case DType::kFloat32: return QuantizeColumnsT<DType::kFloat32>(x, K, threshold, col_absmax, r0, r1, codes);
    case DType::kFloat16: return QuantizeColumnsT<DType::kFloat16>(x, K, threshold, col_absmax, r0, r1, codes);
    case DType::kBFloat16: return QuantizeColumnsT<DType::kBFloat16>(x, K, threshold, col_absmax, r0, r1, codes);
  }
}

void DequantizeRows(const int8_t* codes, const float* stats, int64_t K, int64_t r0, int64_t r1, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF inv = hn::Set(df, kInv127);
  for (int64_t r = r0; r < r1; ++r) {
    const VF s = hn::Set(df, stats[r]);
    int64_t k = 0;
    for (; k + N <= K; k += N) {
      const VF c = hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(DI8(), codes + r * K + k)));
      hn::StoreU(hn::Mul(hn::Mul(c, s), inv), df, out + r * K + k);
    }
    for (; k < K; ++k) out[r * K + k] = (static_cast<float>(codes[r * K + k]) * stats[r]) * kInv127;
  }
}

template <DType kT>
void DequantizeProductT(const int32_t* A, const float* row_stats, const float* col_stats, DType bias_dtype,
                        const void* bias, int64_t N, int64_t r0, int64_t r1, void* out) {
  const DF df;
  const DI di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const VF inv = hn::Set(df, kInv127Squared);
  for (int64_t r = r0; r < r1; ++r) {
    const VF rs = hn::Set(df, row_stats[r]);
    int64_t n = 0;
    const auto bias_at = [&](int64_t j) {
      switch (bias_dtype) {
        case DType::kFloat32: return LoadF32<DType::kFloat32>(bias, j);
        case DType::kFloat16: return LoadF32<DType::kFloat16>(bias, j);
        case DType::kBFloat16: break;
      }
      return LoadF32<DType::kBFloat16>(bias, j);
    };
    for (; n + L <= N; n += L) {
      const VF a = hn::ConvertTo(df, hn::LoadU(di, A + r * N + n));
      VF v = hn::Mul(hn::Mul(a, hn::Mul(rs, hn::LoadU(df, col_stats + n))), inv);
      if (bias != nullptr) v = hn::Add(v, bias_at(n));
      StoreF32<kT>(v, out, r * N + n);
    }
    for (; n < N; ++n) {
      float v = (static_cast<float>(A[r * N + n]) * (row_stats[r] * col_stats[n])) * kInv127Squared;
      if (bias != nullptr) v = v + LoadAsFloat(bias_dtype, bias, n);
      StoreFromFloat(kT, out, r * N + n, v);
    }
  }
}

void DequantizeProduct(const int32_t* A, const float* row_stats, const float* col_stats, DType bias_dtype,
                       const void* bias, int64_t N, int64_t r0, int64_t r1, DType dtype, void* out) {
  switch (dtype) {
    case DType::kFloat32:
      return DequantizeProductT<DType::kFloat32>(A, row_stats, col_stats, bias_dtype, bias, N, r0, r1, out);
    case DType::kFloat16:
      return DequantizeProductT<DType::kFloat16>(A, row_stats, col_stats, bias_dtype, bias, N, r0, r1, out);
    case DType::kBFloat16:
      return DequantizeProductT<DType::kBFloat16>(A, row_stats, col_stats, bias_dtype, bias, N, r0, r1, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(OutlierColumns);
HWY_EXPORT(QuantizeRows);
HWY_EXPORT(ColumnAbsmax);
HWY_EXPORT(QuantizeColumns);
HWY_EXPORT(DequantizeRows);
HWY_EXPORT(DequantizeProduct);

void Int8OutlierColumns(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                        uint8_t* out_flags) {
  if (threshold > 0.0f) HWY_DYNAMIC_DISPATCH(OutlierColumns)(dtype, x, K, threshold, r0, r1, out_flags);
}

void Int8QuantizeRows(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                      int8_t* codes, float* row_stats) {
  HWY_DYNAMIC_DISPATCH(QuantizeRows)(dtype, x, K, threshold, r0, r1, codes, row_stats);
}

void Int8ColumnAbsmax(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                      float* col_absmax) {
  HWY_DYNAMIC_DISPATCH(ColumnAbsmax)(dtype, x, K, threshold, r0, r1, col_absmax);
}

void Int8MergeColumnAbsmax(const float* partial, int64_t K, float* col_absmax) {
  for (int64_t k = 0; k < K; ++k) {
    const auto bits = [](float f) { return static_cast<int32_t>(FloatToBits(f)); };
    col_absmax[k] = BitsToFloat(static_cast<uint32_t>(std::max(bits(col_absmax[k]), bits(partial[k]))));
  }
}

void Int8QuantizeColumns(DType dtype, const void* x, int64_t K, float threshold, const float* col_absmax, int64_t r0,
                         int64_t r1, int8_t* codes) {
  HWY_DYNAMIC_DISPATCH(QuantizeColumns)(dtype, x, K, threshold, col_absmax, r0, r1, codes);
}

void Int8DequantizeRows(const int8_t* codes, const float* stats, int64_t K, int64_t r0, int64_t r1, float* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeRows)(codes, stats, K, r0, r1, out);
}

void Int8DequantizeProduct(const int32_t* A, const float* row_stats, const float* col_stats, DType bias_dtype,
                           const void* bias, int64_t N, int64_t r0, int64_t r1, DType dtype, void* out) {
  HWY_DYNAMIC_DISPATCH(DequantizeProduct)(A, row_stats, col_stats, bias_dtype, bias, N, r0, r1, dtype, out);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
