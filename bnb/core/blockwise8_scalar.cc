// The scalar definition of blockwise 8-bit quantization, and the range check shared by all kernels.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise8.h"

namespace bnb::core {

absl::Status CheckBlocksize(int64_t blocksize, int64_t max) {
  if (blocksize < kMinBlocksize || blocksize > max || (blocksize & (blocksize - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("blocksize must be a power of two in [", kMinBlocksize, ", ",
                                                   max, "], got ", blocksize));
  }
  return absl::OkStatus();
}

float BlockAbsmaxScalar(DType dtype, const void* x, int64_t lo, int64_t hi) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = lo; i < hi; ++i) {
    const float v = LoadAsFloat(dtype, x, i);
    nan |= std::isnan(v);
    amax = std::max(amax, std::fabs(v));
  }
  return nan ? NAN : amax;
}

void QuantizeBlockwise8Scalar(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r,
                              uint8_t* codes, float* absmax) {
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const float amax = BlockAbsmaxScalar(dtype, x, lo, hi);
    absmax[b] = amax;
    for (int64_t i = lo; i < hi; ++i) codes[i] = NearestCode(cb, ScaleToUnit(LoadAsFloat(dtype, x, i), amax));
  }
}

void DequantizeBlockwise8Scalar(DType dtype, const uint8_t* codes, const float* absmax, const float* code_values,
                                const Blockwise8Range& r, void* out) {
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    for (int64_t i = lo; i < hi; ++i) StoreFromFloat(dtype, out, i, code_values[codes[i]] * absmax[b]);
  }
}

}  // namespace bnb::core
