// The scalar definition of the 4-bit matrix-vector product, and what every kernel of it shares.
#include "bnb/core/gemv4.h"

#include <cmath>

#include "bnb/core/blockwise4.h"

namespace bnb::core {

int BlockShift(int64_t blocksize) {
  int shift = 0;
  while ((int64_t{1} << shift) < blocksize) ++shift;
  return shift;
}

float Gemv4RowScalar(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16,
                     int64_t K, int64_t blocksize, int64_t m) {
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t f = m * K + k;
    const float w = code16[PackedCode4(B, f)] * absmax[f / blocksize];
    const float p = LoadAsFloat(dtype, A, k) * w;
    acc = acc + p;
  }
  return acc;
}

void Gemv4Scalar(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
                 int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end) {
  (void)N;
  for (int64_t m = row_begin; m < row_end; ++m) {
    StoreFromFloat(dtype, out, m, Gemv4RowScalar(dtype, A, B, absmax, code16, K, blocksize, m));
  }
}

}  // namespace bnb::core
