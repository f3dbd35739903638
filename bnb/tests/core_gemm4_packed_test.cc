// The packed 4-bit layout (gemm4_packed.h): Pack4 against the layout's definition element by element, and the
// packed product exact on integer-valued data (integer code values, power-of-two scales, small integer A: every
// product and partial sum exact in float32) against gemv4.h's definition on bitsandbytes' layout, for every row
// count the kernels split differently, on every instruction set (the kernels run where the cap allows).
#include "bnb/core/gemm4_packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <random>
#include <vector>

#include "bnb/core/aligned64.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemv4.h"
#include "bnb/core/stream_stores.h"
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

uint32_t BitsOf(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits;
}

int CodeAt(const Weight& w, int64_t n, int64_t k) {
  const int64_t i = n * w.K + k;
  const uint8_t b = w.B[i / 2];
  return i % 2 == 0 ? b >> 4 : b & 15;
}

// Every element of w where the layout says in codes / scales (Pack4's output for all of w's tiles).
void ExpectLayout(const Weight& w, const uint8_t* codes, const std::vector<float>& scales) {
  const int64_t N = w.N, K = w.K, bs = w.blocksize;
  for (int64_t n = 0; n < Packed4Tiles(N) * kPackRows; ++n) {
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

// On every instruction set: whole tiles take vector code where the AVX-512 kernels run, the rest the scalar loop.
TEST_P(EveryIsa, Pack4PutsEveryElementWhereTheLayoutSays) {
  std::mt19937 rng(1);
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 64}, {17, 128, 64}, {32, 256, 128},
                                 {5, 4096, 4096}, {40, 192, 64}, {16, 64, 64}, {48, 1024, 256}, {63, 512, 64}}) {
    const Weight w = RandomWeight(N, K, bs, rng);
    ASSERT_TRUE(Packed4Fits(N, K, bs));
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K), 0xEE);
    std::vector<float> scales(Packed4ScaleCount(N, K, bs), -1.0f);
    // Two calls over halves of the tiles: a thread's share.
    const int64_t tiles = Packed4Tiles(N);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, tiles / 2);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), tiles / 2, tiles);
    ExpectLayout(w, codes.data(), scales);
  }
}

// A weight of kStreamFromBytes and more, into 64-byte aligned codes: the vector code's streaming stores (and its
// prefetch past each row) give the same layout; a start 32 bytes off the alignment, the regular stores.
TEST_P(EveryIsa, LargePackStreamsTheSameLayout) {
  std::mt19937 rng(7);
  const int64_t N = 4096 + 16, K = 4096, bs = 64;
  static_assert((4096 + 16) * 4096 >= kStreamFromBytes, "each pass must move enough to stream");
  const Weight w = RandomWeight(N, K, bs, rng);
  const int64_t tiles = Packed4Tiles(N), bytes = Packed4CodeBytes(N, K);
  Aligned64<uint8_t> buffer(bytes + 32);
  for (const int64_t offset : {0, 32}) {
    uint8_t* codes = buffer.data() + offset;
    std::memset(codes, 0xEE, bytes);
    std::vector<float> scales(Packed4ScaleCount(N, K, bs), -1.0f);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes, scales.data(), 0, tiles / 3);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes, scales.data(), tiles / 3, tiles);
    ExpectLayout(w, codes, scales);
  }
}

// Unpack4 gives bitsandbytes' bytes back, and DequantizePacked4 the values DequantizeBlockwise4 makes of them, on
// every instruction set, whole and partial tiles, in halves as threads split them.
TEST_P(EveryIsa, Unpack4AndDequantizePacked4InvertThePacking) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> scale(0.25f, 3.0f);
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 64}, {17, 128, 64}, {48, 1024, 256},
                                 {63, 512, 64}, {16, 4096, 4096}}) {
    Weight w = RandomWeight(N, K, bs, rng);
    for (auto& s : w.absmax) s = scale(rng);  // any finite scales
    const int64_t tiles = Packed4Tiles(N);
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K));
    std::vector<float> scales(Packed4ScaleCount(N, K, bs));
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, tiles);
    std::vector<uint8_t> back(N * K / 2, 0xEE);
    Unpack4(codes.data(), N, K, back.data(), 0, tiles / 2);
    Unpack4(codes.data(), N, K, back.data(), tiles / 2, tiles);
    ASSERT_EQ(back, w.B) << "N " << N << " K " << K;
    const Packed4 packed{codes.data(), scales.data(), N, K, bs};
    const float* code16 = Code4(Quant4::kNF4).data();
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      const size_t bytes = static_cast<size_t>(N * K * DTypeSize(dtype));
      std::vector<uint8_t> got(bytes, 0xEE), want(bytes, 0x11);
      DequantizePacked4(dtype, packed, code16, got.data(), 0, tiles / 2);
      DequantizePacked4(dtype, packed, code16, got.data() + tiles / 2 * kPackRows * K * DTypeSize(dtype), tiles / 2,
                        tiles);
      DequantizeBlockwise4Scalar(dtype, w.B.data(), w.absmax.data(), code16,
                                 Blockwise4Range{N * K, bs, 0, N * K / bs}, want.data());
      ASSERT_EQ(got, want) << "N " << N << " K " << K << " dtype " << static_cast<int>(dtype);
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

// cpu.amx for a scope (the default, allowed, after).
struct AmxSwitch {
  explicit AmxSwitch(bool allowed) { SetAmxAllowed(allowed); }
  ~AmxSwitch() { SetAmxAllowed(true); }
};

// The AMX kernel's products (gemm4_packed_x86.h): bfloat16 A times the weight rounded to bfloat16 (code value times
// scale in float32, rounded once), summed in float32: within float32 sums' rounding of that product in float64,
// plus the output's rounding. Normal data, NF4, rows that fill row tiles and rows that do not, blocks of one group
// and of several, W's rows in whole tiles and not.
TEST(Gemm4PackedAmx, IsTheBfloat16WeightsProductInFloat32) {
  if (std::string(Gemm4PackedKernelName(DType::kBFloat16, 16)) != "amx") GTEST_SKIP() << "no AMX-BF16 here";
  const float* code16 = Code4(Quant4::kNF4).data();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(0, 255);
  // K = 1344: 21 groups, a last chunk of one for the tile pairs of more than 4 row tiles (M 80, 100, 128). K = 8256:
  // 129 groups, more than one K block of the pair kernel (1 MB of A a block: 64 groups at 128 rows, 100 at 80).
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{37, 192, 64}, {48, 1024, 256},
                                 {20, 4096, 64}, {80, 1344, 64}, {48, 8256, 64}}) {
    Weight w{N, K, bs, std::vector<uint8_t>(N * K / 2), std::vector<float>(N * K / bs)};
    for (auto& b : w.B) b = static_cast<uint8_t>(byte(rng));
    for (auto& v : w.absmax) v = std::fabs(normal(rng)) * 0.05f + 1e-3f;
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K));
    std::vector<float> scales(Packed4ScaleCount(N, K, bs));
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, Packed4Tiles(N));
    const Packed4 packed{codes.data(), scales.data(), N, K, bs};
    std::vector<double> weight(N * K);  // bfloat16(code * scale), as the kernel multiplies it
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t b = w.B[(n * K + k) / 2];
        const int code = k % 2 == 0 ? b >> 4 : b & 15;
        weight[n * K + k] = BF16ToFloat(FloatToBF16(code16[code] * w.absmax[(n * K + k) / bs]));
      }
    }
    for (int64_t M : {3, 16, 17, 64, 80, 100, 128, 200, 256}) {
      ASSERT_EQ(std::string(Gemm4PackedKernelName(DType::kBFloat16, M)), "amx") << M;
      std::vector<float> a(M * K);
      for (auto& v : a) v = normal(rng);
      const std::vector<uint8_t> A = Encode(DType::kBFloat16, a);
      std::vector<uint16_t> out(M * N);
      const int64_t tiles = Packed4Tiles(N);
      Gemm4Packed(DType::kBFloat16, A.data(), M, packed, code16, nullptr, out.data(), 0, 1);
      Gemm4Packed(DType::kBFloat16, A.data(), M, packed, code16, nullptr, out.data(), 1, tiles);
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          double exact = 0.0, magnitude = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double x = BF16ToFloat(FloatToBF16(a[r * K + k]));
            exact += x * weight[n * K + k];
            magnitude += std::fabs(x * weight[n * K + k]);
          }
          const double got = BF16ToFloat(out[r * N + n]);
          const double bound = K * std::ldexp(1.0, -24) * magnitude + std::ldexp(1.0, -8) * std::fabs(exact);
          ASSERT_LE(std::fabs(got - exact), bound) << "M " << M << " row " << r << " n " << n << " N " << N
                                                   << " K " << K << " bs " << bs;
        }
      }
    }
  }
}

// Integer data: code values -8 .. 7 (exact in bfloat16), scales powers of two, A integers in [-3, 3]; every sum
// stays far below 2^24, so any order of exact float32 operations gives the definition's result bit for bit.
TEST_P(EveryIsa, PackedProductIsExactOnIntegerData) {
  float code16[16];
  for (int i = 0; i < 16; ++i) code16[i] = static_cast<float>(i - 8);
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> small(-3, 3);
  int ran = 0;
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{37, 192, 64}, {16, 256, 128},
                                 {33, 4096, 64}, {20, 512, 512}, {80, 1344, 64}}) {
    const Weight w = RandomWeight(N, K, bs, rng);
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K));
    std::vector<float> scales(Packed4ScaleCount(N, K, bs));
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, Packed4Tiles(N));
    const Packed4 packed{codes.data(), scales.data(), N, K, bs};
    for (DType dtype : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
      for (bool bf16_products : {true, false}) {
        for (int64_t M : {1, 2, 3, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 200, 256}) {
          for (bool amx : {false, true}) {  // the AVX512-BF16 kernels, then AMX where the CPU has it (cpu.amx)
            const AmxSwitch amx_switch(amx);
            if (!Gemm4PackedRuns(dtype, M, bf16_products)) continue;
            if (amx != (std::string(Gemm4PackedKernelName(dtype, M, bf16_products)) == "amx")) continue;
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
                                       << " K " << K << " bs " << bs << " bf16_products " << bf16_products
                                       << " amx " << amx;
              }
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

// The blocked product's definition (gemm4_packed.h): each weight code16[code] * absmax in float32, A's value in
// float32, a sum from zero by fused multiply-adds over each kBlockedCols columns, those sums added in order, the
// bias added in float32, one rounding to dtype.
float BlockedScalar(DType dtype, const uint8_t* A, const Weight& w, const float* code16, const float* bias,
                    int64_t r, int64_t n) {
  float total = 0.0f;
  for (int64_t k0 = 0; k0 < w.K; k0 += kBlockedCols) {
    float part = 0.0f;
    for (int64_t k = k0; k < std::min(w.K, k0 + kBlockedCols); ++k) {
      const float value = code16[CodeAt(w, n, k)] * w.absmax[(n * w.K + k) / w.blocksize];
      part = std::fma(LoadAsFloat(dtype, A, r * w.K + k), value, part);
    }
    total = k0 == 0 ? part : total + part;
  }
  return bias == nullptr ? total : total + bias[n];
}

// Normal data, NF4's values, scales that are not powers of two, an infinite scale: the blocked kernel is its
// definition bit for bit (NaN where it is NaN), for rows that fill micro-blocks and rows that do not, blocks of
// A's rows of unequal size, K that ends in a partial panel, tile counts odd and even split as threads split them,
// a share of the weight too wide for one group of tile pairs (N 3600 at 600 rows: 4 MB of sums hold 218 tiles), in
// every dtype it takes.
TEST_P(EveryIsa, BlockedProductIsItsDefinition) {
  if (std::string(Gemm4PackedKernelName(DType::kFloat32, 24)) != "avx512-blocked") {
    GTEST_SKIP() << "no blocked kernel under this cap";
  }
  const float* code16 = Code4(Quant4::kNF4).data();
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> scale(0.01f, 0.2f);
  for (const auto& [N, K, bs, Ms] : {std::tuple<int64_t, int64_t, int64_t, std::vector<int64_t>>{
                                         37, 320, 64, {24, 25, 36, 101, 530}},
                                     {64, 1344, 64, {24, 47}}, {48, 1280, 128, {40}}, {16, 4096, 4096, {30}},
                                     {200, 64, 64, {1030}}, {3600, 64, 64, {600}}}) {
    ASSERT_TRUE(Packed4Fits(N, K, bs));
    Weight w = RandomWeight(N, K, bs, rng);
    for (auto& s : w.absmax) s = scale(rng);
    w.absmax[1] = INFINITY;  // row 0's second block (or row 1's first): infinities and NaN
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K));
    std::vector<float> scales(Packed4ScaleCount(N, K, bs));
    const int64_t tiles = Packed4Tiles(N);
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, tiles);
    const Packed4 packed{codes.data(), scales.data(), N, K, bs};
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      if (N > 1000 && dtype != DType::kFloat32) continue;  // the wide share once: the groups are dtype-blind
      for (const int64_t M : Ms) {
        ASSERT_EQ(std::string(Gemm4PackedKernelName(dtype, M, false)), "avx512-blocked") << M;
        std::vector<float> a(M * K), bias(N);
        for (auto& v : a) v = normal(rng);
        for (auto& v : bias) v = normal(rng);
        const std::vector<uint8_t> A = Encode(dtype, a), bias_bytes = Encode(dtype, bias);
        std::vector<float> bias_values(N);  // the bias as the kernel reads it
        for (int64_t n = 0; n < N; ++n) bias_values[n] = LoadAsFloat(dtype, bias_bytes.data(), n);
        const size_t size = DTypeSize(dtype);
        for (const bool with_bias : {false, true}) {
          std::vector<uint8_t> out(M * N * size), rounded(size);
          const void* b = with_bias ? bias_bytes.data() : nullptr;
          // Three calls, as threads split the tiles: one tile alone, an odd count, the rest.
          const int64_t cut1 = std::min<int64_t>(1, tiles), cut2 = std::min<int64_t>(4, tiles);
          Gemm4Packed(dtype, A.data(), M, packed, code16, b, out.data(), 0, cut1, false);
          Gemm4Packed(dtype, A.data(), M, packed, code16, b, out.data(), cut1, cut2, false);
          Gemm4Packed(dtype, A.data(), M, packed, code16, b, out.data(), cut2, tiles, false);
          for (int64_t r = 0; r < M; ++r) {
            for (int64_t n = 0; n < N; ++n) {
              StoreFromFloat(dtype, rounded.data(), 0,
                             BlockedScalar(dtype, A.data(), w, code16, with_bias ? bias_values.data() : nullptr, r, n));
              const float want = LoadAsFloat(dtype, rounded.data(), 0), got = LoadAsFloat(dtype, out.data(), r * N + n);
              if (std::isnan(want) && std::isnan(got)) continue;
              ASSERT_EQ(BitsOf(got), BitsOf(want))
                  << DTypeName(dtype) << " M " << M << " row " << r << " n " << n << " N " << N << " K " << K
                  << " bias " << with_bias << ": " << got << " vs " << want;
            }
          }
        }
      }
    }
  }
}

// The split of a product over threads: every row and tile in exactly one task, at most `tasks` tasks; one slice of
// rows for the other kernels and where tiles are plentiful, slices of rows where they are few.
TEST(Gemm4PackedSplit, CoversTheProductInAtMostTasks) {
  const bool blocked = std::string(Gemm4PackedKernelName(DType::kFloat32, 24)) == "avx512-blocked";
  for (const int64_t M : {1, 5, 24, 100, 512, 600, 2048}) {
    for (const int64_t N : {16, 64, 1000, 4096, 14336}) {
      for (const int64_t tasks : {1, 2, 3, 16, 64}) {
        for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
          const Packed4Split s = Gemm4PackedSplit(dtype, M, N, tasks);
          const std::string where = "M " + std::to_string(M) + " N " + std::to_string(N) + " tasks " +
                                    std::to_string(tasks) + " " + std::string(DTypeName(dtype));
          ASSERT_GE(s.row_parts, 1) << where;
          ASSERT_GE(s.tile_parts, 1) << where;
          ASSERT_LE(s.row_parts * s.tile_parts, tasks) << where;
          ASSERT_LE(s.tile_parts, Packed4Tiles(N)) << where;
          ASSERT_GE(s.row_parts * s.row_rows, M) << where;  // every row in a slice, no slice empty
          ASSERT_LT((s.row_parts - 1) * s.row_rows, M) << where;
          if (s.row_parts > 1) ASSERT_EQ(std::string(Gemm4PackedKernelName(dtype, M)), "avx512-blocked") << where;
        }
      }
    }
  }
  if (!blocked) GTEST_SKIP() << "no blocked kernel under this cap: one slice of rows everywhere (checked)";
  EXPECT_EQ(Gemm4PackedSplit(DType::kFloat32, 512, 4096, 2).row_parts, 1);  // 128 tiles a thread
  EXPECT_EQ(Gemm4PackedSplit(DType::kFloat32, 512, 4096, 2).tile_parts, 2);
  const Packed4Split few = Gemm4PackedSplit(DType::kFloat32, 512, 1024, 16);  // 4 tiles a thread by tiles alone
  EXPECT_GT(few.row_parts, 1);
  EXPECT_EQ(few.row_rows % kBlockedRows, 0);  // whole micro-blocks
}

// The int8-activation product's definition (gemm4_packed.h), element by element on bitsandbytes' layout.
float Int8RowScalar(DType dtype, const uint8_t* A, const Weight& w, const float* code16, int64_t r, int64_t n) {
  float acc = 0.0f;
  for (int64_t g = 0; g < w.K / 64; ++g) {
    float a[64], top = 0.0f;
    bool finite = true;
    for (int k = 0; k < 64; ++k) {
      a[k] = LoadAsFloat(dtype, A, r * w.K + g * 64 + k);
      finite = finite && std::isfinite(a[k]);
      top = std::max(top, std::fabs(a[k]));
    }
    const float sa = finite ? top / 127.0f : NAN;
    int64_t dot = 0;
    for (int k = 0; sa > 0.0f && k < 64; ++k) {
      const float q = std::nearbyint(std::min(std::max(a[k] / sa, -127.0f), 127.0f));
      dot += static_cast<int64_t>(q) * static_cast<int64_t>(std::nearbyint(127.0f * code16[CodeAt(w, n, g * 64 + k)]));
    }
    const float step = (finite ? top : NAN) / (127.0f * 127.0f);
    const float scale = step * w.absmax[(n * w.K + g * 64) / w.blocksize];
    acc = acc + static_cast<float>(dot) * scale;
  }
  return acc;
}

// Random data and NF4's values (the rounding of 127 * code and of a / sa matter here), special groups: zeros, an
// infinity, a NaN, values too small for a float32 scale, values at a rounding tie. Every row count a pass splits.
TEST_P(EveryIsa, Int8ActivationProductFollowsItsDefinition) {
  const float nf4[16] = {-1.0f, -0.6961928f, -0.5250731f, -0.3949175f, -0.2844414f, -0.1848089f, -0.0910500f, 0.0f,
                         0.0795803f, 0.1609302f, 0.2461123f, 0.3379152f, 0.4407098f, 0.5626170f, 0.7229568f, 1.0f};
  int8_t values[16];
  int bad = -1;
  ASSERT_TRUE(Int8CodeValues(nf4, values, &bad));
  EXPECT_EQ(values[0], -127);
  EXPECT_EQ(values[8], 10);  // 127 * 0.0795803 = 10.1
  const float too_big[16] = {0, 0, 0, 1.5f};
  EXPECT_FALSE(Int8CodeValues(too_big, values, &bad));
  EXPECT_EQ(bad, 3);
  ASSERT_TRUE(Int8CodeValues(nf4, values, &bad));
  if (!Gemm4PackedInt8Runs()) GTEST_SKIP() << "no AVX512-VNNI under this cap";
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [N, K, bs] : {std::tuple<int64_t, int64_t, int64_t>{37, 192, 64}, {16, 256, 128},
                                 {33, 4096, 64}, {20, 512, 512}, {80, 1344, 64}}) {
    Weight w = RandomWeight(N, K, bs, rng);
    for (auto& s : w.absmax) s *= 0.37f;  // scales that are not powers of two
    std::vector<uint8_t> codes(Packed4CodeBytes(N, K));
    std::vector<float> scales(Packed4ScaleCount(N, K, bs));
    Pack4(w.B.data(), w.absmax.data(), N, K, bs, codes.data(), scales.data(), 0, Packed4Tiles(N));
    const Packed4 packed{codes.data(), scales.data(), N, K, bs};
    for (DType dtype : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
      for (int64_t M : {1, 2, 5, 6, 15, 16, 17, 33, 64, 65, 130}) {
        std::vector<float> a(M * K), bias(N);
        for (auto& v : a) v = normal(rng);
        for (auto& v : bias) v = normal(rng);
        if (M > 4) {
          for (int k = 0; k < 64; ++k) a[1 * K + k] = 0.0f;           // row 1, group 0: zeros
          a[2 * K + 5] = INFINITY;                                   // row 2: an infinity
          a[3 * K + K - 1] = NAN;                                    // row 3: a NaN in the last group
          for (int k = 0; k < 64; ++k) a[4 * K + k] = k == 0 ? 127.0f : (k % 2 == 0 ? 0.5f : 2.5f);  // ties
          if (dtype == DType::kFloat32) {
            for (int k = 0; k < 64; ++k) a[4 * K + 64 + k] = 1e-44f;  // scale below float32's range
          }
        }
        const std::vector<uint8_t> A = Encode(dtype, a), bias_bytes = Encode(dtype, bias);
        const size_t size = DTypeSize(dtype);
        std::vector<uint8_t> out(M * N * size), rounded(size);
        const Int8Activations act = QuantizeActivationsInt8(dtype, A.data(), M, K);
        const int64_t tiles = Packed4Tiles(N);
        Gemm4PackedInt8(dtype, act, packed, values, bias_bytes.data(), out.data(), 0, 1);
        Gemm4PackedInt8(dtype, act, packed, values, bias_bytes.data(), out.data(), 1, tiles);
        for (int64_t r = 0; r < M; ++r) {
          for (int64_t n = 0; n < N; ++n) {
            const float got = LoadAsFloat(dtype, out.data(), r * N + n);
            const float b = LoadAsFloat(dtype, bias_bytes.data(), n);
            StoreFromFloat(dtype, rounded.data(), 0, Int8RowScalar(dtype, A.data(), w, nf4, r, n) + b);
            const float expect = LoadAsFloat(dtype, rounded.data(), 0);
            if (std::isnan(expect)) {
              ASSERT_TRUE(std::isnan(got)) << DTypeName(dtype) << " M " << M << " row " << r << " n " << n;
              if (dtype != DType::kFloat32) {  // 16-bit outputs: the rounding's one NaN (bfloat16 0x7FC0)
                ASSERT_EQ(std::memcmp(out.data() + (r * N + n) * size, rounded.data(), size), 0)
                    << DTypeName(dtype) << " NaN bits, M " << M << " row " << r << " n " << n;
              }
            } else {
              ASSERT_EQ(got, expect) << DTypeName(dtype) << " M " << M << " row " << r << " n " << n << " N " << N
                                     << " K " << K << " bs " << bs;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace bnb::core
