// The packed 4-bit layout (gemm4_packed.h): Pack4 against the layout's definition element by element, and the
// packed product exact on integer-valued data (integer code values, power-of-two scales, small integer A: every
// product and partial sum exact in float32) against gemv4.h's definition on bitsandbytes' layout, for every row
// count the kernels split differently, on every instruction set (the kernels run where the cap allows).
#include "bnb/core/gemm4_packed.h"

#include <cmath>
#include <cstring>
#include <tuple>
#include <random>
#include <vector>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemv4.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::Encode;
using tests::EveryIsa;

struct Weight {
  int64_t N, K, blocksize;
  std::vector<uint8_t> B;       // bitsandbytes' packing
  std::vector<float> absmax;
};

Weight RandomWeight(int64_t N, int64_t K, int64_t blocksize, std::mt19937& rng) {
  Weight w{N, K, blocksize, std::vector<uint8_t>(N * K / 2), std::vector<float>(N * K / blocksize)};
  std::uniform_int_distribution<int> byte(0, 255), exponent(-3, 3);
  for (auto& b : w.B) b = static_cast<uint8_t>(byte(rng));
  for (auto& s : w.absmax) s = std::ldexp(1.0f, exponent(rng));
  return w;
}

int CodeAt(const Weight& w, int64_t n, int64_t k) {
  const int64_t i = n * w.K + k;
  const uint8_t b = w.B[i / 2];
  return i % 2 == 0 ? b >> 4 : b & 15;
}

TEST(Pack4, EveryElementGoesWhereTheLayoutSays) {
  std::mt19937 rng(1);
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 64}, {17, 128, 64}, {32, 256, 128},
                                 {5, 4096, 4096}, {40, 192, 64}}) {
    const Weight w = RandomWeight(N, K, bs, rng);
    ASSERT_TRUE(Packed4Fits(N, K, bs));
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K), 0xEE);
    std::vector<float> scales(Packed4ScaleCount(N, K, bs), -1.0f);
    // Two calls over halves of the tiles: a thread's share.
    const int64_t tiles = Packed4Tiles(N);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, tiles / 2);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), tiles / 2, tiles);
    for (int64_t n = 0; n < tiles * kPackRows; ++n) {
      const int64_t t = n / kPackRows, j = n % kPackRows;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t g = k / 64, c = k % 64, h = c / 32, p = (c % 32) / 2, e = c % 2;
        const uint8_t byte = codes[((t * (K / 64) + g) * 16 + p) * 32 + 2 * j + e];
        const int got = h == 0 ? byte & 15 : byte >> 4;
        ASSERT_EQ(got, n < N ? CodeAt(w, n, k) : 0) << "N " << N << " K " << K << " row " << n << " col " << k;
      }
      for (int64_t b = 0; b < K / bs; ++b) {
        ASSERT_EQ(scales[(t * (K / bs) + b) * kPackRows + j], n < N ? w.absmax[n * (K / bs) + b] : 0.0f);
      }
    }
  }
}

TEST(Pack4, FitsOnlyTheShapesItTakes) {
  EXPECT_TRUE(Packed4Fits(1, 64, 64));
  EXPECT_TRUE(Packed4Fits(3, 4096, 4096));
  EXPECT_FALSE(Packed4Fits(3, 96, 64));    // K not a multiple of 64
  EXPECT_FALSE(Packed4Fits(3, 128, 32));   // blocks smaller than a group
  EXPECT_FALSE(Packed4Fits(3, 192, 128));  // blocks across rows
  EXPECT_FALSE(Packed4Fits(0, 64, 64));
  EXPECT_FALSE(Packed4Fits(3, 0, 64));
}

INSTANTIATE_TEST_SUITE_P(Isa, EveryIsa, ::testing::ValuesIn(AvailableIsas()));

// Integer data: code values -8 .. 7 (exact in bfloat16), scales powers of two, A integers in [-3, 3]; every sum
// stays far below 2^24, so any order of exact float32 operations gives the definition's result bit for bit.
TEST_P(EveryIsa, PackedProductIsExactOnIntegerData) {
  float code16[16];
  for (int i = 0; i < 16; ++i) code16[i] = static_cast<float>(i - 8);
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> small(-3, 3);
  int ran = 0;
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{37, 192, 64}, {16, 256, 128},
                                 {33, 4096, 64}, {20, 512, 512}}) {
    const Weight w = RandomWeight(N, K, bs, rng);
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K));
    std::vector<float> scales(Packed4ScaleCount(N, K, bs));
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, Packed4Tiles(N));
    const Packed4 packed{codes.data(), scales.data(), N, K, bs};
    for (DType dtype : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
      for (bool bf16_products : {true, false}) {
        for (int64_t M : {1, 2, 3, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128}) {
          if (!Gemm4PackedRuns(dtype, M, bf16_products)) continue;
          ++ran;
          std::vector<float> a(M * K), bias(N);
          for (auto& v : a) v = static_cast<float>(small(rng));
          for (auto& v : bias) v = static_cast<float>(small(rng));
          const std::vector<uint8_t> A = Encode(dtype, a), bias_bytes = Encode(dtype, bias);
          const size_t size = DTypeSize(dtype);
          std::vector<uint8_t> out(M * N * size), rounded(size);
          // Two calls over parts of the tiles, as threads split them.
          const int64_t tiles = Packed4Tiles(N);
          Gemm4Packed(dtype, A.data(), M, packed, code16, bias_bytes.data(), out.data(), 0, 1, bf16_products);
          Gemm4Packed(dtype, A.data(), M, packed, code16, bias_bytes.data(), out.data(), 1, tiles, bf16_products);
          for (int64_t r = 0; r < M; ++r) {
            for (int64_t n = 0; n < N; ++n) {
              const float got = LoadAsFloat(dtype, out.data(), r * N + n);
              const float sum = Gemv4RowScalar(dtype, A.data() + r * K * size, w.B.data(), w.absmax.data(), code16,
                                               K, bs, n);
              StoreFromFloat(dtype, rounded.data(), 0, sum + bias[n]);  // the bias added in float32, one rounding
              const float expect = LoadAsFloat(dtype, rounded.data(), 0);
              ASSERT_EQ(got, expect) << DTypeName(dtype) << " M " << M << " row " << r << " n " << n << " N " << N
                                     << " K " << K << " bs " << bs << " bf16_products " << bf16_products;
            }
          }
        }
      }
    }
  }
  if (ActiveGemv4Kernel(DType::kFloat32, 128) != Gemv4Kernel::kHighway) {
    EXPECT_GT(ran, 0) << "the AVX-512 kernels did not run";
  }
}

}  // namespace
}  // namespace bnb::core
