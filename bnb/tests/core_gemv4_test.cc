// The 4-bit matrix-vector product against a double-precision dequantize-then-dot reference on every target, exact
// on integer-valued data, with blocks running across rows.
#include "bnb/core/gemv4.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::Encode;
using tests::EveryIsa;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

struct Shape {
  int64_t n, k, blocksize;
};

// Row counts and K that exercise: one row; K not a multiple of the blocksize (blocks across rows); odd K and odd
// N * K (rows starting mid-byte, a padded last byte); K above the kernel's K slice; blocks smaller than a vector.
// K a multiple of 32 takes the kernel's fast path for whole chunks of the row, and the general one for the rest:
// 96 and 8224 leave a rest, and with blocksize 64 put chunks across block boundaries. K above 65536 is sliced.
const Shape kShapes[] = {{1, 32, 32},    {3, 64, 32},     {7, 100, 64},   {5, 33, 32},    {9, 1000, 128},
                         {2, 257, 256},  {3, 8200, 32},   {4, 4103, 4096}, {16, 4096, 64}, {11, 77, 2048},
                         {6, 4097, 64},  {7, 96, 64},     {5, 4160, 32},  {3, 8224, 4096}, {4, 8224, 64},
                         {2, 128, 128},  {2, 65600, 64},  {1, 65601, 32},
                         // K a multiple of 128 (the AVX-512 kernels): 4 and 2 blocks per chunk, blocks of several
                         // chunks, blocks across row ends (4224 = 16.5 * 256), a block longer than a row.
                         {3, 384, 32},   {4, 256, 64},    {5, 4224, 256}, {2, 1280, 512}, {3, 4224, 4096},
                         {9, 128, 4096},
                         // Pairs of rows (the bfloat16 kernel, K above 8192) with blocks of one chunk, of several,
                         // of a whole row, and rows left over.
                         {5, 8320, 64},  {4, 8448, 256},  {3, 16384, 4096}, {4, 8320, 32}};

TEST_P(EveryIsa, MatchesDequantizeThenDot) {
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4})
  for (DType dtype : kDTypes)
  for (bool bf16_products : {true, false})
  for (const Shape& s : kShapes) {
    if (!bf16_products && dtype != DType::kBFloat16) continue;  // the knob concerns bfloat16 A alone
    SCOPED_TRACE(testing::Message() << Quant4Name(q) << " " << DTypeName(dtype) << " N " << s.n << " K " << s.k
                                    << " blocksize " << s.blocksize << " bf16_products " << bf16_products);
    std::mt19937 rng(static_cast<uint32_t>(s.n * 7919 + s.k));
    std::normal_distribution<float> normal;
    const int64_t total = s.n * s.k;
    std::vector<float> w(total), a(s.k);
    for (auto& v : w) v = normal(rng);
    for (auto& v : a) v = normal(rng);
    std::vector<uint8_t> packed(PackedSize4(total));
    std::vector<float> absmax(NumBlocks(total, s.blocksize));
    QuantizeBlockwise4(DType::kFloat32, w.data(), q, {total, s.blocksize, 0, NumBlocks(total, s.blocksize)},
                       packed.data(), absmax.data());
    std::vector<float> wq(total);
    DequantizeBlockwise4(DType::kFloat32, packed.data(), absmax.data(), Code4(q).data(),
                         {total, s.blocksize, 0, NumBlocks(total, s.blocksize)}, wq.data());
    const auto a_raw = Encode(dtype, a);

    std::vector<uint8_t> out(s.n * DTypeSize(dtype)), out_ref(s.n * DTypeSize(dtype));
    Gemv4(dtype, a_raw.data(), packed.data(), absmax.data(), Code4(q).data(), s.n, s.k, s.blocksize, out.data(), 0,
          s.n, bf16_products);
    Gemv4Scalar(dtype, a_raw.data(), packed.data(), absmax.data(), Code4(q).data(), s.n, s.k, s.blocksize,
                out_ref.data(), 0, s.n);
    // The bfloat16-code kernels round the code values to bfloat16 (gemv4.h): exact against those values, and within
    // their rounding (2^-8 of each term: bfloat16 keeps 8 significant bits) of the true ones.
    const bool bf16_codes = RoundsCodesToBf16(ActiveGemv4Kernel(dtype, s.k, bf16_products));
    EXPECT_EQ(bf16_codes, dtype == DType::kBFloat16 && bf16_products && GetParam() != "scalar");
    std::vector<float> rounded(16);
    for (int c = 0; c < 16; ++c) rounded[c] = BF16ToFloat(FloatToBF16(Code4(q)[c]));
    for (int64_t m = 0; m < s.n; ++m) {
      double ref = 0, mag = 0, ref_rounded = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        const int64_t f = m * s.k + k;
        const double x = LoadAsFloat(dtype, a_raw.data(), k);
        const double t = x * wq[f];
        ref += t;
        mag += std::fabs(t);
        ref_rounded += x * (double{rounded[PackedCode4(packed.data(), f)]} * absmax[f / s.blocksize]);
      }
      const double tol = tests::GemvTolerance(dtype, ref, mag);
      const double code_rounding = bf16_codes ? std::ldexp(mag, -8) : 0.0;
      EXPECT_NEAR(LoadAsFloat(dtype, out.data(), m), ref, tol + code_rounding) << "row " << m;
      EXPECT_NEAR(LoadAsFloat(dtype, out_ref.data(), m), ref, tol) << "scalar, row " << m;
      if (bf16_codes) {
        EXPECT_NEAR(LoadAsFloat(dtype, out.data(), m), ref_rounded, tests::GemvTolerance(dtype, ref_rounded, mag))
            << "bfloat16 codes, row " << m;
      }
    }
  }
}

TEST_P(EveryIsa, ExactOnIntegerValues) {
  // Integer code values, absmax and A: every product and partial sum is an integer below 2^24, so any summation
  // order gives the exact result, rounded once to dtype.
  std::vector<float> code16(16);
  for (int c = 0; c < 16; ++c) code16[c] = static_cast<float>(c - 8);
  for (DType dtype : kDTypes)
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " N " << s.n << " K " << s.k << " blocksize "
                                    << s.blocksize);
    std::mt19937 rng(static_cast<uint32_t>(s.n + s.k));
    std::uniform_int_distribution<int> byte(0, 255), small(-4, 4), scale(1, 3);
    const int64_t total = s.n * s.k;
    std::vector<uint8_t> packed(PackedSize4(total));
    for (auto& b : packed) b = static_cast<uint8_t>(byte(rng));
    std::vector<float> absmax(NumBlocks(total, s.blocksize)), a(s.k);
    for (auto& v : absmax) v = static_cast<float>(scale(rng));
    for (auto& v : a) v = static_cast<float>(small(rng));
    const auto a_raw = Encode(dtype, a);
    std::vector<uint8_t> out(s.n * DTypeSize(dtype)), out_ref(s.n * DTypeSize(dtype));
    Gemv4(dtype, a_raw.data(), packed.data(), absmax.data(), code16.data(), s.n, s.k, s.blocksize, out.data(), 0,
          s.n);
    Gemv4Scalar(dtype, a_raw.data(), packed.data(), absmax.data(), code16.data(), s.n, s.k, s.blocksize,
                out_ref.data(), 0, s.n);
    for (int64_t m = 0; m < s.n; ++m) {
      int64_t exact = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        const int64_t f = m * s.k + k;
        exact += static_cast<int64_t>(a[k]) * (PackedCode4(packed.data(), f) - 8) *
                 static_cast<int64_t>(absmax[f / s.blocksize]);
      }
      std::vector<uint8_t> expected(DTypeSize(dtype));
      StoreFromFloat(dtype, expected.data(), 0, static_cast<float>(exact));
      EXPECT_EQ(LoadAsFloat(dtype, out.data(), m), LoadAsFloat(dtype, expected.data(), 0)) << "row " << m;
      EXPECT_EQ(LoadAsFloat(dtype, out_ref.data(), m), LoadAsFloat(dtype, expected.data(), 0)) << "row " << m;
    }
  }
}

TEST_P(EveryIsa, RowRangeWritesOnlyItsRows) {
  const int64_t n = 9, k = 75, bs = 32, total = n * k;
  std::vector<uint8_t> packed(PackedSize4(total));
  std::mt19937 rng(1);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  std::vector<float> absmax(NumBlocks(total, bs), 0.5f), a(k, 1.0f);
  const auto& code16 = Code4(Quant4::kNF4);
  std::vector<float> whole(n), part(n, 99.0f);
  Gemv4(DType::kFloat32, a.data(), packed.data(), absmax.data(), code16.data(), n, k, bs, whole.data(), 0, n);
  Gemv4(DType::kFloat32, a.data(), packed.data(), absmax.data(), code16.data(), n, k, bs, part.data(), 3, 7);
  for (int64_t m = 0; m < n; ++m) EXPECT_EQ(part[m], m >= 3 && m < 7 ? whole[m] : 99.0f) << m;
}

TEST_P(EveryIsa, NestedStatisticsGiveTheProductOfTheAbsmaxTheyStandFor) {
  // Gemv4Nested expands the nested statistics a band of rows at a time: bit for bit Gemv4 with the whole absmax,
  // for any row range (bands then start before it), with bands of one row (K a multiple of the blocksize), of
  // `step` rows (rows starting mid-block) and blocks longer than rows.
  std::vector<float> code256(256);
  for (int i = 0; i < 256; ++i) code256[i] = static_cast<float>(i - 128) / 128.0f;
  for (const Shape& s : kShapes) {
    if (s.n * s.k > (int64_t{1} << 20)) continue;
    SCOPED_TRACE(testing::Message() << "N " << s.n << " K " << s.k << " blocksize " << s.blocksize);
    std::mt19937 rng(static_cast<uint32_t>(s.n * 31 + s.k));
    const int64_t total = s.n * s.k, blocks = NumBlocks(total, s.blocksize);
    std::vector<uint8_t> packed(PackedSize4(total)), q(blocks);
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    std::vector<float> absmax2(NumBlocks(blocks, kNestedBlocksize)), a(s.k);
    std::normal_distribution<float> normal;
    for (auto& v : absmax2) v = std::fabs(normal(rng)) + 0.1f;
    for (auto& v : a) v = normal(rng);
    const float offset = 0.37f;
    std::vector<float> absmax(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      const float scaled = code256[q[b]] * absmax2[b / kNestedBlocksize];
      absmax[b] = scaled + offset;
    }
    const NestedAbsmax nested{q.data(), code256.data(), absmax2.data(), offset};
    const auto& code16 = Code4(Quant4::kNF4);
    for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, s.n}, {s.n / 3, s.n}, {s.n / 2, s.n / 2 + 1}}) {
      std::vector<float> want(s.n, 7.0f), got(s.n, 7.0f);
      Gemv4(DType::kFloat32, a.data(), packed.data(), absmax.data(), code16.data(), s.n, s.k, s.blocksize,
            want.data(), r0, r1);
      Gemv4Nested(DType::kFloat32, a.data(), packed.data(), nested, code16.data(), s.n, s.k, s.blocksize, got.data(),
                  r0, r1);
      for (int64_t m = 0; m < s.n; ++m) {
        EXPECT_EQ(FloatToBits(got[m]), FloatToBits(want[m])) << "rows " << r0 << ".." << r1 << ", row " << m;
      }
    }
  }
}

TEST_P(EveryIsa, SmallBatchesMatchTheDefinitionRowByRow) {
  // Gemm4Small (the AVX-512 kernels, or Highway's on vector targets): each output against the float64 product of
  // its row, within Gemv4's bound (and the bfloat16 weights' rounding where kAvx512Bf16 runs); exact on integer
  // values; bias added once; a W row range writes only its columns; nested statistics give the same bits as their
  // absmax; with exact code values each row has the bits Gemv4 gives it alone.
  std::vector<float> int_code(16);
  for (int c = 0; c < 16; ++c) int_code[c] = static_cast<float>(c - 8);
  for (DType dtype : kDTypes)
  for (const Shape& s : kShapes) {
    if (s.k % 128 != 0 || s.n * s.k > (int64_t{1} << 20)) continue;
    for (int64_t M : {1, 2, 3, 8, 9, 17, 33}) {
      if (!Gemm4SmallRuns(dtype, M, s.k)) continue;
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " N " << s.n << " K " << s.k << " blocksize "
                                      << s.blocksize << " M " << M);
      std::mt19937 rng(static_cast<uint32_t>(s.n * 13 + s.k + M));
      std::uniform_int_distribution<int> byte(0, 255), small(-4, 4), scale(1, 3);
      const int64_t total = s.n * s.k, blocks = NumBlocks(total, s.blocksize);
      std::vector<uint8_t> packed(PackedSize4(total));
      for (auto& b : packed) b = static_cast<uint8_t>(byte(rng));
      std::vector<float> absmax(blocks), a(M * s.k), bias(s.n);
      for (auto& v : absmax) v = static_cast<float>(scale(rng));
      for (auto& v : a) v = static_cast<float>(small(rng));
      for (auto& v : bias) v = static_cast<float>(small(rng));
      const auto a_raw = Encode(dtype, a);
      const auto bias_raw = Encode(dtype, bias);
      std::vector<uint8_t> out(M * s.n * DTypeSize(dtype), 0xAB);
      const int64_t n0 = s.n / 3, n1 = s.n;  // a range of W's rows: the others' columns stay untouched
      Gemm4Small(dtype, a_raw.data(), M, packed.data(), absmax.data(), nullptr, int_code.data(), s.n, s.k,
                 s.blocksize, bias_raw.data(), out.data(), n0, n1);
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t n = 0; n < s.n; ++n) {
          const int64_t i = r * s.n + n;
          if (n < n0) {
            EXPECT_EQ(out[i * DTypeSize(dtype)], 0xAB) << "row " << r << " column " << n;
            continue;
          }
          int64_t exact = static_cast<int64_t>(bias[n]);
          for (int64_t k = 0; k < s.k; ++k) {
            const int64_t f = n * s.k + k;
            exact += static_cast<int64_t>(a[r * s.k + k]) * (PackedCode4(packed.data(), f) - 8) *
                     static_cast<int64_t>(absmax[f / s.blocksize]);
          }
          std::vector<uint8_t> expected(DTypeSize(dtype));
          StoreFromFloat(dtype, expected.data(), 0, static_cast<float>(exact));
          ASSERT_EQ(LoadAsFloat(dtype, out.data(), i), LoadAsFloat(dtype, expected.data(), 0))
              << "row " << r << " column " << n;
        }
      }
      // Real code values: within the gemv bound of the float64 product, and nested statistics alike in bits.
      std::normal_distribution<float> normal;
      for (auto& v : a) v = normal(rng);
      const auto a_real = Encode(dtype, a);
      const auto& code16 = Code4(Quant4::kNF4);
      std::vector<float> code256(256), absmax2(NumBlocks(blocks, kNestedBlocksize));
      std::vector<uint8_t> q(blocks);
      for (int i = 0; i < 256; ++i) code256[i] = static_cast<float>(i) / 255.0f;
      for (auto& v : absmax2) v = std::fabs(normal(rng)) + 0.5f;
      for (auto& b : q) b = static_cast<uint8_t>(byte(rng));
      for (int64_t b = 0; b < blocks; ++b) {
        const float scaled = code256[q[b]] * absmax2[b / kNestedBlocksize];
        absmax[b] = scaled + 0.25f;
      }
      const NestedAbsmax nested{q.data(), code256.data(), absmax2.data(), 0.25f};
      std::vector<uint8_t> plain(M * s.n * DTypeSize(dtype)), via_nested(plain.size());
      Gemm4Small(dtype, a_real.data(), M, packed.data(), absmax.data(), nullptr, code16.data(), s.n, s.k,
                 s.blocksize, nullptr, plain.data(), 0, s.n);
      Gemm4Small(dtype, a_real.data(), M, packed.data(), nullptr, &nested, code16.data(), s.n, s.k, s.blocksize,
                 nullptr, via_nested.data(), 0, s.n);
      EXPECT_EQ(plain, via_nested);
      const bool bf16_codes = ActiveGemm4SmallKernel(dtype, M, s.k) == Gemm4SmallKernel::kAvx512Bf16;
      EXPECT_EQ(ActiveGemm4SmallKernel(dtype, M, s.k) == Gemm4SmallKernel::kHighway,
                GetParam().rfind("avx3", 0) != 0);
      // The Highway kernel with exact code values (bf16_products off, which only bfloat16 A reads): row by row
      // Gemv4's bits.
      std::vector<uint8_t> exact_codes(plain.size()), row_alone(s.n * DTypeSize(dtype));
      Gemm4Small(dtype, a_real.data(), M, packed.data(), absmax.data(), nullptr, code16.data(), s.n, s.k,
                 s.blocksize, nullptr, exact_codes.data(), 0, s.n, false);
      const bool highway = ActiveGemm4SmallKernel(dtype, M, s.k, false) == Gemm4SmallKernel::kHighway;
      for (int64_t r = 0; r < M && highway; ++r) {
        Gemv4(dtype, a_real.data() + r * s.k * DTypeSize(dtype), packed.data(), absmax.data(), code16.data(), s.n,
              s.k, s.blocksize, row_alone.data(), 0, s.n, false);
        for (int64_t n = 0; n < s.n; ++n) {
          ASSERT_EQ(FloatToBits(LoadAsFloat(dtype, exact_codes.data(), r * s.n + n)),
                    FloatToBits(LoadAsFloat(dtype, row_alone.data(), n)))
              << "row " << r << " column " << n;
        }
      }
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t n = 0; n < s.n; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < s.k; ++k) {
            const int64_t f = n * s.k + k;
            const double w = double{code16[PackedCode4(packed.data(), f)]} * absmax[f / s.blocksize];
            const double t = double{LoadAsFloat(dtype, a_real.data(), r * s.k + k)} * w;
            ref += t;
            mag += std::fabs(t);
          }
          const double tol = tests::GemvTolerance(dtype, ref, mag) + (bf16_codes ? std::ldexp(mag, -8) : 0.0);
          ASSERT_NEAR(LoadAsFloat(dtype, plain.data(), r * s.n + n), ref, tol) << "row " << r << " column " << n;
        }
      }
    }
  }
}

TEST_P(EveryIsa, SaysWhichKernelRuns) {
  // The AVX-512 kernels take K a multiple of 128 under an avx3 (or better) cap; everything else the Highway kernel,
  // whose vector targets round the code values to bfloat16 for bfloat16 A with bf16_products (the scalar target
  // runs the definition).
  const bool avx3 = GetParam().rfind("avx3", 0) == 0;  // avx3 and its better variants
  const bool scalar = GetParam() == "scalar";
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Gemv4Kernel highway =
        dtype == DType::kBFloat16 && !scalar ? Gemv4Kernel::kHighwayBf16 : Gemv4Kernel::kHighway;
    EXPECT_EQ(ActiveGemv4Kernel(dtype, 4000), highway);
    EXPECT_EQ(ActiveGemv4Kernel(dtype, 4000, false), Gemv4Kernel::kHighway);
    const Gemv4Kernel k4096 = ActiveGemv4Kernel(dtype, 4096);
    if (!avx3) {
      EXPECT_EQ(k4096, highway);
    }
    if (dtype != DType::kBFloat16) {
      EXPECT_FALSE(RoundsCodesToBf16(k4096));
    }
    std::printf("[ gemv4    ] isa %s, %s A, K 4096: kernel %s\n", ActiveIsa().c_str(),
                std::string(DTypeName(dtype)).c_str(), Gemv4KernelName(k4096));
  }
}

INSTANTIATE_TEST_SUITE_P(Gemv4, EveryIsa, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bnb::core
