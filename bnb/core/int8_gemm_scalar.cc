// The scalar definition of the int8 matrix product (int8_gemm.h).
#include "bnb/core/int8_gemm.h"

namespace bnb::core::int8_scalar {

void Gemm(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0, int64_t n1,
          int32_t* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = n0; n < n1; ++n) {
      int32_t sum = 0;  // |sum| <= 128 * 128 * K < 2^31
      for (int64_t k = 0; k < K; ++k) sum += int32_t{A[m * lda + k]} * int32_t{B[n * ldb + k]};
      C[m * ldc + n] = sum;
    }
  }
}

}  // namespace bnb::core::int8_scalar
