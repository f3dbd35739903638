// The int8 matrix product equals its scalar definition bit for bit on every instruction set: every shape up to
// 33 x 33 (tile edges), K around the step lengths, strided operands and column ranges, the AMX kernel's tiles and
// slices with cpu.amx on and off, the largest sums (-128 everywhere, K = 131071, and 131008 for AMX), and the
// definition against products worked out by hand.
#include "bnb/core/int8_gemm.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/int8_gemm_x86.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::EveryIsa;

std::vector<int8_t> Random(int64_t n, std::mt19937& rng) {
  std::vector<int8_t> v(static_cast<size_t>(n));
  for (int8_t& x : v) x = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  return v;
}

// C = A B^T by Int8Gemm over columns [n0, n1), against the definition; C's other columns must stay untouched.
void ExpectSame(const std::vector<int8_t>& A, int64_t lda, const std::vector<int8_t>& B, int64_t ldb, int64_t M,
                int64_t K, int64_t n0, int64_t n1, int64_t ldc) {
  std::vector<int32_t> got(static_cast<size_t>(M * ldc), -7), want(got);
  Int8Gemm(A.data(), lda, B.data(), ldb, M, K, n0, n1, got.data(), ldc);
  int8_scalar::Gemm(A.data(), lda, B.data(), ldb, M, K, n0, n1, want.data(), ldc);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < ldc; ++n) {
      ASSERT_EQ(got[m * ldc + n], want[m * ldc + n])
          << "C[" << m << ", " << n << "] of " << M << " x [" << n0 << ", " << n1 << ") x K " << K << ", kernel "
          << Int8GemmKernelName(ActiveInt8GemmKernel());
    }
  }
}

TEST(Int8GemmScalar, MatchesHandComputedProducts) {
  const std::vector<int8_t> A = {1, -2, 3, -128, 127, 0};  // 2 x 3
  const std::vector<int8_t> B = {4, 5, -6, -128, -128, 2};  // 2 x 3
  std::vector<int32_t> C(4);
  int8_scalar::Gemm(A.data(), 3, B.data(), 3, 2, 3, 0, 2, C.data(), 2);
  EXPECT_EQ(C, (std::vector<int32_t>{4 - 10 - 18, -128 + 256 + 6, -512 + 635, 16384 - 16256}));
}

// cpu.amx off for a scope (the knob's default, on, restored after).
struct AmxOff {
  AmxOff() { SetAmxAllowed(false); }
  ~AmxOff() { SetAmxAllowed(true); }
};

TEST_P(EveryIsa, Int8GemmRunsTheKernelOfItsInstructionSet) {
  const std::string kernel = Int8GemmKernelName(ActiveInt8GemmKernel());
#if BNB_INT8_GEMM_X86
  const bool vnni = __builtin_cpu_supports("avx512vnni");
  const bool amx = int8_gemm_x86::HasAmxInt8();
  EXPECT_TRUE(!amx || (__builtin_cpu_supports("amx-int8") && vnni));
#else
  const bool vnni = false, amx = false;
#endif
  if (GetParam().rfind("avx3", 0) == 0) {  // AVX-512 without VNNI runs the AVX2 kernel
    EXPECT_EQ(kernel, amx ? "amx" : vnni ? "avx512vnni" : "avx2");
    const AmxOff off;
    EXPECT_EQ(std::string(Int8GemmKernelName(ActiveInt8GemmKernel())), vnni ? "avx512vnni" : "avx2");
  } else if (GetParam() == "avx2") {
    EXPECT_EQ(kernel, "avx2");
  } else {  // a cap below avx2 (or another architecture) never runs the x86 kernels
    EXPECT_EQ(kernel, "scalar") << GetParam() << " (Highway target " << ActiveTarget() << ")";
  }
}

// The AMX kernel's cases (K a multiple of 64; whole tiles of 16 columns, the rest by VNNI), with cpu.amx on and off,
// so that both kernels meet them on a processor with AMX: rows on each side of the 16-row tiles and the pairs of
// them (a pair's second tile partly or wholly past M), column ranges that start off a tile and leave a tail, strided
// operands, and more rows than one arranged slice of A holds (1 MB: 256 rows at K = 4096).
TEST_P(EveryIsa, Int8GemmEqualsScalarOnTheTiledKernelsCases) {
  std::mt19937 rng(5);
  for (const bool amx : {true, false}) {
    std::optional<AmxOff> off;
    if (!amx) off.emplace();
    for (const int64_t K : {64, 128, 704}) {
      const int64_t lda = K + 64, ldb = K + 192, N = 70, ldc = N + 3;
      const std::vector<int8_t> A = Random(50 * lda, rng), B = Random(N * ldb, rng);
      for (const int64_t M : {1, 15, 16, 17, 31, 32, 33, 48, 50}) {
        for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, 16}, {0, 32}, {0, 48}, {0, 70}, {5, 69},
                                     {16, 64}, {3, 18}}) {
          ExpectSame(A, lda, B, ldb, M, K, n0, n1, ldc);
        }
      }
    }
    const int64_t M = 300, N = 48, K = 4096;
    const std::vector<int8_t> A = Random(M * K, rng), B = Random(N * K, rng);
    ExpectSame(A, K, B, K, M, K, 0, N, N);
  }
}

TEST_P(EveryIsa, Int8GemmEqualsScalarOnEveryShapeUpTo33) {
  std::mt19937 rng(1);
  for (const int64_t K : {1, 15, 16, 17, 63, 64, 65, 100, 130}) {
    const std::vector<int8_t> A = Random(33 * K, rng), B = Random(33 * K, rng);
    for (int64_t M = 1; M <= 33; ++M) {
      for (int64_t N = 1; N <= 33; ++N) ExpectSame(A, K, B, K, M, K, 0, N, N);
    }
  }
}

TEST_P(EveryIsa, Int8GemmEqualsScalarWithStridesAndColumnRanges) {
  std::mt19937 rng(2);
  for (const int64_t K : {5, 64, 200, 1000, 4097}) {
    const int64_t M = 37, N = 45, lda = K + 3, ldb = K + 64, ldc = N + 2;
    const std::vector<int8_t> A = Random(M * lda, rng), B = Random(N * ldb, rng);
    for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {1, 30}, {7, 8}, {16, 45}, {44, 45}, {9, 9}}) {
      ExpectSame(A, lda, B, ldb, M, K, n0, n1, ldc);
    }
  }
}

TEST_P(EveryIsa, Int8GemmEqualsScalarOnLargerShapes) {
  // Several panels of B and blocks of A (K large enough that a block of A holds few rows).
  std::mt19937 rng(3);
  for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{70, 300, 1024}, {9, 90, 70000}, {600, 9, 8000}}) {
    const std::vector<int8_t> A = Random(M * K, rng), B = Random(N * K, rng);
    ExpectSame(A, K, B, K, M, K, 0, N, N);
  }
}

TEST_P(EveryIsa, Int8GemmGivesTheLargestSumsExactly) {
  // -128 * -128 over K = 131071 is 2147467264, just below 2^31; -128 * 127 gives the most negative sums. The VNNI
  // kernel's unsigned operand (b + 128) then reaches 255 and its sums pass 2^31 before the correction.
  const int64_t K = kInt8GemmMaxK, M = 5, N = 6;
  std::vector<int8_t> A(M * K, -128), B(N * K, -128);
  for (int64_t k = 0; k < K; ++k) B[1 * K + k] = 127;       // row 1: -128 * 127 everywhere
  for (int64_t k = 0; k < K; k += 2) B[2 * K + k] = 127;    // row 2: alternating
  for (int64_t k = 0; k < K; ++k) A[3 * K + k] = 127;       // A row 3: 127 * 127 and 127 * -128
  std::vector<int32_t> C(M * N);
  Int8Gemm(A.data(), K, B.data(), K, M, K, 0, N, C.data(), N);
  EXPECT_EQ(C[0], 2147467264);
  EXPECT_EQ(C[1], -128 * 127 * K);
  EXPECT_EQ(C[3 * N + 1], 127 * 127 * K);
  ExpectSame(A, K, B, K, M, K, 0, N, N);
  std::mt19937 rng(4);
  const std::vector<int8_t> R = Random(3 * K, rng);
  ExpectSame(R, K, B, K, 3, K, 0, N, N);
  // The AMX kernel's largest K (a multiple of 64) over whole tiles of 16 columns.
  const int64_t K64 = kInt8GemmMaxK / 64 * 64, N16 = 16;
  std::vector<int8_t> A64(M * K64, -128), B64(N16 * K64, -128);
  for (int64_t k = 0; k < K64; ++k) B64[1 * K64 + k] = 127;
  std::vector<int32_t> C64(M * N16);
  Int8Gemm(A64.data(), K64, B64.data(), K64, M, K64, 0, N16, C64.data(), N16);
  EXPECT_EQ(C64[0], 128 * 128 * K64);
  EXPECT_EQ(C64[1], -128 * 127 * K64);
  ExpectSame(A64, K64, B64, K64, M, K64, 0, N16, N16);
}

TEST_P(EveryIsa, Int8GemmOfEmptyKIsZero) {
  const std::vector<int8_t> A(4), B(4);
  std::vector<int32_t> C(6, -1);
  Int8Gemm(A.data(), 1, B.data(), 1, 2, 0, 0, 3, C.data(), 3);
  EXPECT_EQ(C, std::vector<int32_t>(6, 0));
}

INSTANTIATE_TEST_SUITE_P(Int8Gemm, EveryIsa, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bnb::core
