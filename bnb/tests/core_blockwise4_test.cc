// The 4-bit codebooks, hand-computed codes and packing, the special-value policy, and every vectorized target
// equal to the scalar definition exactly.
#include "bnb/core/blockwise4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/stream_stores.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::Encode;
using tests::EveryIsa;
using tests::ExpectSameBits;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Quant4 kQuants[] = {Quant4::kNF4, Quant4::kFP4};

TEST(Codebook4, NF4IsBitsandbytesValues) {
  // get_4bit_type("nf4"), as float32.
  const float expected[16] = {-1.0f,
                              -0.6961928009986877f,
                              -0.5250730514526367f,
                              -0.39491748809814453f,
                              -0.28444138169288635f,
                              -0.18477343022823334f,
                              -0.09105003625154495f,
                              0.0f,
                              0.07958029955625534f,
                              0.16093020141124725f,
                              0.24611230194568634f,
                              0.33791524171829224f,
                              0.44070982933044434f,
                              0.5626170039176941f,
                              0.7229568362236023f,
                              1.0f};
  const auto& nf4 = Code4(Quant4::kNF4);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(FloatToBits(nf4[i]), FloatToBits(expected[i])) << i;
  // The decimal strings are float32 values printed in full: they round-trip through double unchanged.
  EXPECT_EQ(static_cast<double>(nf4[1]), -0.6961928009986877);
  EXPECT_EQ(static_cast<double>(nf4[13]), 0.5626170039176941);
  for (int i = 0; i < 15; ++i) EXPECT_LT(nf4[i], nf4[i + 1]);
}

TEST(Codebook4, FP4IsBitsandbytesValuesOverTwelve) {
  const float raw[16] = {0, 0.0625f, 8, 12, 4, 6, 2, 3, -0.0f, -0.0625f, -8, -12, -4, -6, -2, -3};
  const auto& fp4 = Code4(Quant4::kFP4);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(FloatToBits(fp4[i]), FloatToBits(raw[i] / 12.0f)) << i;
  EXPECT_EQ(FloatToBits(fp4[0]), 0u);           // +0
  EXPECT_EQ(FloatToBits(fp4[8]), 0x80000000u);  // -0
  EXPECT_EQ(fp4[3], 1.0f);
  EXPECT_EQ(fp4[11], -1.0f);
  EXPECT_EQ(fp4[5], 0.5f);
  EXPECT_EQ(fp4[15], -0.25f);
}

TEST(Codebook4, SearchTables) {
  const Codebook4& nf4 = GetCodebook4(Quant4::kNF4);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(nf4.sorted_to_code[i], i);
  int rounded_up = 0;  // midpoints whose rounding lands above the true one, so the split is the float below
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(nf4.midpoints[i], SplitPoint(nf4.values[i], nf4.values[i + 1]));
    rounded_up += nf4.midpoints[i] != (nf4.values[i] + nf4.values[i + 1]) * 0.5f;
  }
  EXPECT_EQ(rounded_up, 6);
  // FP4 in ascending order: -1 -2/3 -1/2 -1/3 -1/4 -1/6 -1/192 (0 twice: +0 is code 0, -0 code 8, so 0 both times)
  // 1/192 1/6 1/4 1/3 1/2 2/3 1.
  const Codebook4& fp4 = GetCodebook4(Quant4::kFP4);
  const uint8_t expected[16] = {11, 10, 13, 12, 15, 14, 9, 0, 0, 1, 6, 7, 4, 5, 2, 3};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(fp4.sorted_to_code[i], expected[i]) << i;
  EXPECT_EQ(fp4.midpoints[7], 0.0f);
  for (int i = 0; i < 14; ++i) EXPECT_LT(fp4.midpoints[i], fp4.midpoints[i + 1]);
}

TEST(Codebook4, ParseQuant4) {
  EXPECT_EQ(*ParseQuant4("nf4"), Quant4::kNF4);
  EXPECT_EQ(*ParseQuant4("fp4"), Quant4::kFP4);
  EXPECT_EQ(Quant4Name(Quant4::kNF4), "nf4");
  EXPECT_EQ(Quant4Name(Quant4::kFP4), "fp4");
  for (const char* bad : {"NF4", "int4", "", "fp8"}) {
    const auto st = ParseQuant4(bad).status();
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(std::string("'") + bad + "'"), absl::string_view::npos) << st;
    EXPECT_NE(st.message().find("nf4"), absl::string_view::npos) << st;
    EXPECT_NE(st.message().find("fp4"), absl::string_view::npos) << st;
  }
}

struct Quantized {
  std::vector<uint8_t> packed;
  std::vector<float> absmax;
};

Quantized Quantize(const std::vector<float>& x, int64_t bs, Quant4 q) {
  const int64_t n = static_cast<int64_t>(x.size());
  Quantized out{std::vector<uint8_t>(PackedSize4(n), 0xEE), std::vector<float>(NumBlocks(n, bs))};
  QuantizeBlockwise4(DType::kFloat32, x.data(), q, {n, bs, 0, NumBlocks(n, bs)}, out.packed.data(),
                     out.absmax.data());
  return out;
}

TEST(Blockwise4, HandComputedNF4HighNibbleFirstOddPadded) {
  // absmax 1. 1 -> 15, -1 -> 0, 0 -> 7; 0.5 lies below the 12|13 midpoint 0.5017 -> 12 (0.4407);
  // -0.2 lies between the 4|5 midpoint -0.2346 and the 5|6 midpoint -0.1379 -> 5 (-0.1848).
  const Quantized r = Quantize({1.0f, -1.0f, 0.0f, 0.5f, -0.2f}, 32, Quant4::kNF4);
  EXPECT_EQ(r.absmax, std::vector<float>{1.0f});
  EXPECT_EQ(r.packed, (std::vector<uint8_t>{0xF0, 0x7C, 0x57}));  // the pad nibble: 0.0's code, 7
  std::vector<float> out(5);
  DequantizeBlockwise4(DType::kFloat32, r.packed.data(), r.absmax.data(), Code4(Quant4::kNF4).data(),
                       {5, 32, 0, 1}, out.data());
  const auto& v = Code4(Quant4::kNF4);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -1.0f, 0.0f, v[12], v[5]}));
}

TEST(Blockwise4, HandComputedFP4) {
  // absmax 12: 12 -> 1 (code 3), -3 -> -1/4 (15), 0 -> 0 (0), 6 -> 1/2 (5), 2 -> 1/6 (6), -12 -> -1 (11).
  const Quantized r = Quantize({12.0f, -3.0f, 0.0f, 6.0f, 2.0f, -12.0f}, 64, Quant4::kFP4);
  EXPECT_EQ(r.absmax, std::vector<float>{12.0f});
  EXPECT_EQ(r.packed, (std::vector<uint8_t>{0x3F, 0x05, 0x6B}));
  std::vector<float> out(6);
  DequantizeBlockwise4(DType::kFloat32, r.packed.data(), r.absmax.data(), Code4(Quant4::kFP4).data(),
                       {6, 64, 0, 1}, out.data());
  EXPECT_EQ(out, (std::vector<float>{12.0f, -3.0f, 0.0f, 6.0f, 2.0f, -12.0f}));
}

TEST(Blockwise4, TwoBlocksEachWithItsAbsmax) {
  // n = 33, blocksize 32: the second block is the single element 32, in the high nibble of byte 16 beside the
  // pad nibble (0.0's code, 7).
  std::vector<float> x(33, 0.0f);
  x[0] = 2.0f;    // block 0: absmax 2, element 0 -> 1 (NF4 15), element 1 -> 0 (7)
  x[32] = -5.0f;  // block 1: absmax 5, -1 -> 0
  const Quantized r = Quantize(x, 32, Quant4::kNF4);
  EXPECT_EQ(r.absmax, (std::vector<float>{2.0f, 5.0f}));
  ASSERT_EQ(r.packed.size(), 17u);
  EXPECT_EQ(r.packed[0], 0xF7);
  for (int k = 1; k < 16; ++k) EXPECT_EQ(r.packed[k], 0x77) << k;
  EXPECT_EQ(r.packed[16], 0x07);
  // A range that does not end the buffer leaves byte 16 alone; the one that does pads it.
  std::vector<uint8_t> parts(17, 0xEE);
  std::vector<float> am(2);
  QuantizeBlockwise4(DType::kFloat32, x.data(), Quant4::kNF4, {33, 32, 0, 1}, parts.data(), am.data());
  EXPECT_EQ(parts[16], 0xEE);
  QuantizeBlockwise4(DType::kFloat32, x.data(), Quant4::kNF4, {33, 32, 1, 2}, parts.data(), am.data());
  EXPECT_EQ(parts, r.packed);
  std::vector<uint8_t> scalar(17, 0xEE);
  QuantizeBlockwise4Scalar(DType::kFloat32, x.data(), Quant4::kNF4, {33, 32, 1, 2}, scalar.data(), am.data());
  EXPECT_EQ(scalar[16], 0x07);
  EXPECT_EQ(PadCode4(Quant4::kNF4), 7);
  EXPECT_EQ(PadCode4(Quant4::kFP4), 0);
}

TEST(Blockwise4, TiesGoToTheLowerValueAndZeroToCodeZero) {
  for (Quant4 q : kQuants) {
    const Codebook4& cb = GetCodebook4(q);
    // Each midpoint exactly (absmax 1), and one float above it.
    std::vector<float> x = {1.0f};
    for (int i = 0; i < 15; ++i) {
      x.push_back(cb.midpoints[i]);
      x.push_back(std::nextafter(cb.midpoints[i], 2.0f));
    }
    x.push_back(-0.0f);
    x.push_back(0.0f);
    const Quantized r = Quantize(x, 32, q);
    const int64_t n = static_cast<int64_t>(x.size());
    for (int i = 0; i < 15; ++i) {
      EXPECT_EQ(PackedCode4(r.packed.data(), 1 + 2 * i), cb.sorted_to_code[i]) << "midpoint " << i;
      EXPECT_EQ(PackedCode4(r.packed.data(), 2 + 2 * i), cb.sorted_to_code[i + 1]) << "above midpoint " << i;
    }
    // Both zeros take the lowest code holding 0 (FP4: +0 is code 0, -0 code 8).
    const uint8_t zero_code = q == Quant4::kNF4 ? 7 : 0;
    EXPECT_EQ(PackedCode4(r.packed.data(), n - 2), zero_code);
    EXPECT_EQ(PackedCode4(r.packed.data(), n - 1), zero_code);
  }
}

TEST(Blockwise4, SpecialValues) {
  for (Quant4 q : kQuants) {
    std::vector<float> x(96, 0.5f);
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // block 0: zeros
    x[40] = NAN;                                // block 1: NaN
    x[70] = INFINITY;                           // block 2: inf
    x[71] = -INFINITY;
    const Quantized r = Quantize(x, 32, q);
    std::vector<float> out(96);
    DequantizeBlockwise4(DType::kFloat32, r.packed.data(), r.absmax.data(), Code4(q).data(), {96, 32, 0, 3},
                         out.data());
    EXPECT_EQ(r.absmax[0], 0.0f);
    EXPECT_TRUE(std::isnan(r.absmax[1]));
    EXPECT_TRUE(std::isinf(r.absmax[2]));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.0f) << i;
    for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
    // NaN scales to NaN, whose code is that of the lowest value (-1).
    EXPECT_EQ(Code4(q)[PackedCode4(r.packed.data(), 40)], -1.0f);
    EXPECT_EQ(out[70], INFINITY);
    EXPECT_EQ(out[71], -INFINITY);
    EXPECT_TRUE(std::isnan(out[64]));  // 0.5 / inf = 0 -> code of 0, times inf
  }
}

// Random normal data; with `specials`, a zero block, NaN, +-inf and subnormals; every 5th block instead holds 1
// and values at, just above and just below the midpoints (ties and near-ties for both codebooks) and the AVX-512
// search's bucket edges.
std::vector<float> TestData(int64_t n, int64_t bs, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng) * 3.0f;
  std::vector<float> edges;
  for (Quant4 q : kQuants) {
    for (float m : GetCodebook4(q).midpoints) {
      for (float e : {m, std::nextafter(m, 2.0f), std::nextafter(m, -2.0f)}) edges.push_back(e);
    }
    for (float c : Code4(q)) edges.push_back(c);
  }
  // The bucket edges of the AVX-512 position search (Bucket4 in blockwise4_hwy.cc): +-k/16 and their neighbours.
  for (int k = 0; k <= 16; ++k) {
    for (float s : {1.0f, -1.0f}) {
      const float e = s * static_cast<float>(k) / 16.0f;
      for (float f : {e, std::nextafter(e, 2.0f), std::nextafter(e, -2.0f)}) edges.push_back(std::clamp(f, -1.0f, 1.0f));
    }
  }
  std::uniform_int_distribution<size_t> pick(0, edges.size() - 1);
  for (int64_t b = 0; b * bs < n; b += 5) {
    for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) v[i] = edges[pick(rng)];
    v[b * bs] = 1.0f;
  }
  if (specials && n > 600) {
    tests::AddSpecialValues(v);
  }
  return v;
}

TEST_P(EveryIsa, EqualsScalarExactly) {
  // Dequantization also with an arbitrary 16-value map (gemv_4bit's `code` tensor may be any).
  std::vector<float> other(16);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto& c : other) c = u(rng);
  for (Quant4 q : kQuants)
  for (DType dtype : kDTypes) {
    for (int64_t bs = kMinBlocksize; bs <= kMaxBlocksize; bs *= 2) {
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{31}, int64_t{33}, bs * 3 + 17, int64_t{10007}}) {
        SCOPED_TRACE(testing::Message() << Quant4Name(q) << " " << DTypeName(dtype) << " blocksize " << bs << " n "
                                        << n);
        const auto x = Encode(dtype, TestData(n, bs, static_cast<uint32_t>(n + bs), /*specials=*/true));
        const Blockwise4Range r{n, bs, 0, NumBlocks(n, bs)};
        std::vector<uint8_t> packed(PackedSize4(n), 0xAA), packed_ref(PackedSize4(n), 0x55);
        std::vector<float> absmax(r.block_end), absmax_ref(r.block_end);
        QuantizeBlockwise4(dtype, x.data(), q, r, packed.data(), absmax.data());
        QuantizeBlockwise4Scalar(dtype, x.data(), q, r, packed_ref.data(), absmax_ref.data());
        ASSERT_EQ(packed, packed_ref);
        for (int64_t b = 0; b < r.block_end; ++b) ASSERT_EQ(FloatToBits(absmax[b]), FloatToBits(absmax_ref[b])) << b;

        for (const float* code16 : {Code4(q).data(), static_cast<const float*>(other.data())}) {
          std::vector<uint8_t> out(n * DTypeSize(dtype)), out_ref(n * DTypeSize(dtype));
          DequantizeBlockwise4(dtype, packed.data(), absmax.data(), code16, r, out.data());
          DequantizeBlockwise4Scalar(dtype, packed.data(), absmax.data(), code16, r, out_ref.data());
          ExpectSameBits(dtype, out, out_ref, n);
        }
      }
    }
  }
}

// bfloat16 input by table (bf16_codes.h): every bfloat16 magnitude up to the absmax against the scalar definition,
// for the absmax values of tests::Bf16AbsmaxCases. An odd count leaves a pad nibble.
TEST_P(EveryIsa, EveryBfloat16EqualsScalar) {
  for (Quant4 q : kQuants) {
    ASSERT_NE(GetCodebook4(q).bf16_codes, nullptr);
    for (const uint16_t a : tests::Bf16AbsmaxCases(GetCodebook4(q).bf16_codes->rows())) {
      SCOPED_TRACE(testing::Message() << Quant4Name(q) << " absmax bits " << std::hex << a);
      const int64_t bs = 4096;
      std::vector<uint16_t> x = tests::Every16BitUpTo(a, bs);
      if (x.size() % 2 == 0) x.push_back(0x8000);
      const int64_t n = static_cast<int64_t>(x.size());
      const Blockwise4Range r{n, bs, 0, NumBlocks(n, bs)};
      std::vector<uint8_t> packed(PackedSize4(n), 0xAA), packed_ref(PackedSize4(n), 0x55);
      std::vector<float> absmax(r.block_end), absmax_ref(r.block_end);
      QuantizeBlockwise4(DType::kBFloat16, x.data(), q, r, packed.data(), absmax.data());
      QuantizeBlockwise4Scalar(DType::kBFloat16, x.data(), q, r, packed_ref.data(), absmax_ref.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(PackedCode4(packed.data(), i), PackedCode4(packed_ref.data(), i)) << "x bits " << std::hex << x[i];
      }
      ASSERT_EQ(packed, packed_ref);
    }
  }
}

// The AVX-512 kernel codes bfloat16 and float16 blocks by the bits of x and of the absmax (KeyPlan in
// blockwise4_hwy.cc): one table per absmax mantissa, applied from absmax bits 768 on for bfloat16 (0x0300, 2^-121),
// 6144 for float16 (0x1800, 2^-9), 5 binades of magnitudes below the absmax. Every mantissa (at one exponent; a
// sample at another), absmaxes about that bound and the largest finite: every magnitude from past those 5 binades up
// to the absmax, both signs, at blocksizes 64, 512 (float16 takes keys from there on, from 64 on Intel) and 4096.
TEST_P(EveryIsa, Every16BitAbsmaxMantissaEqualsScalar) {
  struct Case {
    DType dtype;
    int mantissa_bits;
    std::vector<uint16_t> amaxes;
  };
  std::vector<Case> cases = {{DType::kBFloat16, 7, {0x02FF, 0x0300, 0x0301, 0x037F, 0x0380, 0x7F7F, 0x7F00}},
                             {DType::kFloat16, 10, {0x17FF, 0x1800, 0x1801, 0x1BFF, 0x1C00, 0x7BFF, 0x7800}}};
  for (Case& c : cases) {
    const int one = c.dtype == DType::kBFloat16 ? 0x3F80 : 0x3C00;
    for (int m = 0; m < (1 << c.mantissa_bits); ++m) c.amaxes.push_back(static_cast<uint16_t>(one | m));
    for (int m : {0, 1, 100, (1 << c.mantissa_bits) - 1}) c.amaxes.push_back(static_cast<uint16_t>(one + 0x1000 + m));
  }
  for (const Case& c : cases)
  for (Quant4 q : kQuants)
  for (const int64_t bs : {int64_t{64}, int64_t{512}, int64_t{4096}}) {
    const int below = (5 << c.mantissa_bits) + 60;  // past the span
    std::vector<uint16_t> x;
    for (const uint16_t a : c.amaxes) {
      for (int h = std::max(0, a - below); h <= a; ++h) {
        for (const int sign : {0, 0x8000}) {
          if (static_cast<int64_t>(x.size()) % bs == 0) x.push_back(a);
          x.push_back(static_cast<uint16_t>(h | sign));
        }
      }
      while (static_cast<int64_t>(x.size()) % bs != 0) x.push_back(0x8000 | a);  // the block ends with its absmax
    }
    SCOPED_TRACE(testing::Message() << DTypeName(c.dtype) << " " << Quant4Name(q) << " blocksize " << bs);
    const int64_t n = static_cast<int64_t>(x.size());
    const Blockwise4Range r{n, bs, 0, NumBlocks(n, bs)};
    std::vector<uint8_t> packed(PackedSize4(n), 0xAA), packed_ref(PackedSize4(n), 0x55);
    std::vector<float> absmax(r.block_end), absmax_ref(r.block_end);
    QuantizeBlockwise4(c.dtype, x.data(), q, r, packed.data(), absmax.data());
    QuantizeBlockwise4Scalar(c.dtype, x.data(), q, r, packed_ref.data(), absmax_ref.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(PackedCode4(packed.data(), i), PackedCode4(packed_ref.data(), i))
          << "x bits " << std::hex << x[i] << " absmax bits " << x[i / bs * bs];
    }
    ASSERT_EQ(absmax, absmax_ref);
  }
}

TEST_P(EveryIsa, SubrangesEqualTheWholeAndWriteOnlyTheirBytes) {
  for (Quant4 q : kQuants) {
    const int64_t n = 64 * 10 + 5, bs = 64;
    const auto x = Encode(DType::kFloat32, TestData(n, bs, 7, false));
    std::vector<uint8_t> whole(PackedSize4(n)), parts(PackedSize4(n), 0xAA);
    std::vector<float> am_whole(11), am_parts(11, -1.0f);
    QuantizeBlockwise4(DType::kFloat32, x.data(), q, {n, bs, 0, 11}, whole.data(), am_whole.data());
    QuantizeBlockwise4(DType::kFloat32, x.data(), q, {n, bs, 4, 7}, parts.data(), am_parts.data());
    for (int64_t k = 0; k < PackedSize4(n); ++k) {
      if (k >= 4 * bs / 2 && k < 7 * bs / 2) {
        EXPECT_EQ(parts[k], whole[k]) << k;
      } else {
        EXPECT_EQ(parts[k], 0xAA) << k;
      }
    }
    for (int b = 0; b < 11; ++b) EXPECT_EQ(am_parts[b], b >= 4 && b < 7 ? am_whole[b] : -1.0f) << b;
    QuantizeBlockwise4(DType::kFloat32, x.data(), q, {n, bs, 0, 4}, parts.data(), am_parts.data());
    QuantizeBlockwise4(DType::kFloat32, x.data(), q, {n, bs, 7, 11}, parts.data(), am_parts.data());
    EXPECT_EQ(whole, parts);
    EXPECT_EQ(am_whole, am_parts);

    std::vector<float> out_whole(n), out_parts(n, 7.0f);
    DequantizeBlockwise4(DType::kFloat32, whole.data(), am_whole.data(), Code4(q).data(), {n, bs, 0, 11},
                         out_whole.data());
    DequantizeBlockwise4(DType::kFloat32, whole.data(), am_whole.data(), Code4(q).data(), {n, bs, 3, 11},
                         out_parts.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out_parts[i], i < 3 * bs ? 7.0f : out_whole[i]) << i;
  }
}

// Ranges that start and end inside the AVX-512 kernels' groups of 16 blocks, in every dtype, with an odd count:
// together they write what the whole does, each only its own bytes and absmax entries.
TEST_P(EveryIsa, RangesAcrossBlockGroupsEqualTheWhole) {
  for (Quant4 q : kQuants)
  for (DType dtype : kDTypes) {
    for (int64_t bs : {int64_t{32}, int64_t{64}}) {
      SCOPED_TRACE(testing::Message() << Quant4Name(q) << " " << DTypeName(dtype) << " blocksize " << bs);
      const int64_t n = bs * 41 + 5, blocks = NumBlocks(n, bs);
      const auto x = Encode(dtype, TestData(n, bs, static_cast<uint32_t>(bs), /*specials=*/true));
      std::vector<uint8_t> whole(PackedSize4(n)), parts(PackedSize4(n));
      std::vector<float> am_whole(blocks), am_parts(blocks);
      QuantizeBlockwise4(dtype, x.data(), q, {n, bs, 0, blocks}, whole.data(), am_whole.data());
      const int64_t cuts[] = {0, 5, 23, blocks};
      for (int k = 0; k + 1 < 4; ++k) {
        std::vector<uint8_t> before = parts;
        QuantizeBlockwise4(dtype, x.data(), q, {n, bs, cuts[k], cuts[k + 1]}, parts.data(), am_parts.data());
        const int64_t first = cuts[k] * bs / 2, last = std::min(PackedSize4(n), cuts[k + 1] * bs / 2);
        for (int64_t j = 0; j < PackedSize4(n); ++j) {
          if (j < first || j >= last) ASSERT_EQ(parts[j], before[j]) << "range " << k << " wrote byte " << j;
        }
      }
      EXPECT_EQ(parts, whole);
      for (int64_t b = 0; b < blocks; ++b) ASSERT_EQ(FloatToBits(am_parts[b]), FloatToBits(am_whole[b])) << b;
    }
  }
}

TEST_P(EveryIsa, RoundTripErrorIsThatOfTheCodebook) {
  // Mean absolute error of randn through quantize + dequantize, near bitsandbytes' published figures
  // (NF4: blocksize 64 0.0728, 128 0.0768, 4096 0.0925; FP4 blocksize 64 0.0965).
  const int64_t n = 1 << 20;
  std::vector<float> x(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  struct Case {
    Quant4 q;
    int64_t bs;
    double expected;
  };
  for (const Case& c : {Case{Quant4::kNF4, 64, 0.0728}, Case{Quant4::kNF4, 128, 0.0768},
                        Case{Quant4::kNF4, 4096, 0.0925}, Case{Quant4::kFP4, 64, 0.0965}}) {
    const Quantized r = Quantize(x, c.bs, c.q);
    std::vector<float> out(n);
    DequantizeBlockwise4(DType::kFloat32, r.packed.data(), r.absmax.data(), Code4(c.q).data(),
                         {n, c.bs, 0, NumBlocks(n, c.bs)}, out.data());
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err += std::fabs(double{x[i]} - out[i]);
    err /= n;
    EXPECT_NEAR(err, c.expected, 0.002) << Quant4Name(c.q) << " blocksize " << c.bs;
  }
}

// Outputs of kStreamFromBytes and more moved, 64-byte aligned, are written with streaming stores: still exactly the scalar values,
// NaN and inf blocks and the odd tail after the last 32-element chunk included.
TEST_P(EveryIsa, LargeAlignedOutputsEqualScalar) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    const int64_t n = kStreamFromBytes / DTypeSize(dtype) + 1001, bs = 64;
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint8_t> packed(PackedSize4(n));
    std::mt19937 rng(4);
    for (auto& p : packed) p = static_cast<uint8_t>(rng());
    std::vector<float> absmax = tests::TestAbsmax(NumBlocks(n, bs), rng);
    absmax.back() = -0.0f;
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    tests::Aligned64 aligned(bytes);
    uint8_t* out = aligned.data();
    std::vector<uint8_t> out_ref(bytes);
    const Blockwise4Range r{n, bs, 0, NumBlocks(n, bs)};
    DequantizeBlockwise4(dtype, packed.data(), absmax.data(), Code4(Quant4::kNF4).data(), r, out);
    DequantizeBlockwise4Scalar(dtype, packed.data(), absmax.data(), Code4(Quant4::kNF4).data(), r, out_ref.data());
    ASSERT_EQ(std::memcmp(out, out_ref.data(), bytes), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Blockwise4, EveryIsa, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bnb::core
