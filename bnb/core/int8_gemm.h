// The int8 matrix product of LLM.int8(): C[m, n] = sum_k A[m, k] * B[n, k], int8 inputs, exact int32 sums.
//
// A is [M, K] and B is [N, K], both row-major with K contiguous (B is a weight's codes, one output per row); C is
// [M, N]. Each call computes the columns [n0, n1) of all M rows, so callers split N across threads (or split M by
// offsetting A and C). K is at most kInt8GemmMaxK, so no sum of 128 * 128 products overflows int32.
//
// Kernels (int8_gemm_x86.cc, int8_gemm_amx.cc), chosen at each call under the cpu.isa cap (cpu_isa.h):
//   - amx: TDPBSSD, when the dispatched instruction set is avx3 or better, the cpu.amx knob allows AMX and the
//     processor has AMX-INT8 (and AVX512-VNNI, which takes the columns, K and fewest rows the tiles do not);
//   - avx512vnni: vpdpbusd, when the dispatched instruction set is avx3 or better and the processor has
//     AVX512-VNNI;
//   - avx2: sign extension to int16 and vpmaddwd (exact; never vpmaddubsw, which saturates), when it is avx2 or
//     better;
//   - scalar (int8_scalar::Gemm) below that and on other architectures.
// All of them return the scalar definition's int32 values exactly.
#pragma once

#include <cstdint>

namespace bnb::core {

inline constexpr int64_t kInt8GemmMaxK = 131071;  // 128 * 128 * 131071 < 2^31

enum class Int8GemmKernel { kScalar, kAvx2, kAvx512Vnni, kAmxInt8 };

// The kernel Int8Gemm runs now (the cap, the cpu.amx knob and the processor decide), and its name ("scalar", "avx2",
// "avx512vnni", "amx").
Int8GemmKernel ActiveInt8GemmKernel();
const char* Int8GemmKernelName(Int8GemmKernel kernel);

// Columns [n0, n1) of C = A B^T for all M rows. lda, ldb, ldc: row strides in elements (lda, ldb >= K,
// ldc >= n1). Requires 0 <= K <= kInt8GemmMaxK (K = 0 gives zeros). Allocates a packed copy of at most ~1 MB of A
// (plus K bytes per row when K is larger) for the call.
void Int8Gemm(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
              int64_t n1, int32_t* C, int64_t ldc);

namespace int8_scalar {
// The definition: for each (m, n) in range, an int32 sum over k = 0, 1, ..., K - 1 of A[m, k] * B[n, k].
void Gemm(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0, int64_t n1,
          int32_t* C, int64_t ldc);
}  // namespace int8_scalar

}  // namespace bnb::core
