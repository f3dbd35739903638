// The scalar definitions of the LLM.int8() passes (int8.h), element by element.
#include <algorithm>
#include <cmath>

#include "bnb/core/int8.h"

namespace bnb::core::int8_scalar {
namespace {

bool IsOutlier(float v, float threshold) { return threshold > 0.0f && std::fabs(v) >= threshold; }

// The magnitude bits of v (0 for an outlier): as int32 they order magnitudes, NaN above +inf.
int32_t MagnitudeBits(float v, float threshold) {
  return IsOutlier(v, threshold) ? 0 : static_cast<int32_t>(FloatToBits(v) & 0x7FFFFFFFu);
}

bool Usable(float absmax) { return std::isfinite(absmax) && absmax > 0.0f; }

int8_t Clamped(float q) { return static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, q))); }

}  // namespace

void OutlierColumns(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                    uint8_t* out_flags) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t k = 0; k < K; ++k) out_flags[k] |= IsOutlier(LoadAsFloat(dtype, x, r * K + k), threshold);
  }
}

void QuantizeRows(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, int8_t* codes,
                  float* row_stats) {
  for (int64_t r = r0; r < r1; ++r) {
    int32_t bits = 0;
    for (int64_t k = 0; k < K; ++k) bits = std::max(bits, MagnitudeBits(LoadAsFloat(dtype, x, r * K + k), threshold));
    const float absmax = BitsToFloat(static_cast<uint32_t>(bits));
    row_stats[r] = absmax;
    const float scale = 127.0f / absmax;
    for (int64_t k = 0; k < K; ++k) {
      const float v = LoadAsFloat(dtype, x, r * K + k);
      codes[r * K + k] = Usable(absmax) ? Clamped(std::nearbyint(v * scale)) : 0;
    }
  }
}

void ColumnAbsmax(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                  float* col_absmax) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t bits = MagnitudeBits(LoadAsFloat(dtype, x, r * K + k), threshold);
      col_absmax[k] = BitsToFloat(static_cast<uint32_t>(std::max(static_cast<int32_t>(FloatToBits(col_absmax[k])),
                                                                 bits)));
    }
  }
}

void QuantizeColumns(DType dtype, const void* x, int64_t K, float threshold, const float* col_absmax, int64_t r0,
                     int64_t r1, int8_t* codes) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      const float raw = LoadAsFloat(dtype, x, r * K + k);
      const float v = IsOutlier(raw, threshold) ? 0.0f : raw;
      codes[r * K + k] = Usable(col_absmax[k]) ? Clamped(std::nearbyint((v * 127.0f) / col_absmax[k])) : 0;
    }
  }
}

void DequantizeRows(const int8_t* codes, const float* stats, int64_t K, int64_t r0, int64_t r1, float* out) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t k = 0; k < K; ++k) out[r * K + k] = (static_cast<float>(codes[r * K + k]) * stats[r]) * kInv127;
  }
}

void DequantizeProduct(const int32_t* A, const float* row_stats, const float* col_stats, DType bias_dtype,
                       const void* bias, int64_t N, int64_t r0, int64_t r1, DType dtype, void* out) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      float v = (static_cast<float>(A[r * N + n]) * (row_stats[r] * col_stats[n])) * kInv127Squared;
      if (bias != nullptr) v = v + LoadAsFloat(bias_dtype, bias, n);
      StoreFromFloat(dtype, out, r * N + n, v);
    }
  }
}

}  // namespace bnb::core::int8_scalar

namespace bnb::core {

void Int8DequantizeColumns(const int8_t* codes, int64_t K, const float* stats, const int64_t* cols, int64_t n_cols,
                           int64_t r0, int64_t r1, DType dtype, void* out) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t j = 0; j < n_cols; ++j) {
      StoreFromFloat(dtype, out, r * n_cols + j, (static_cast<float>(codes[r * K + cols[j]]) * stats[r]) * kInv127);
    }
  }
}

}  // namespace bnb::core
