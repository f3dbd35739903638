// Every vectorized target equals the scalar definition exactly; the special-value policy of blockwise8.h holds.
#include "bnb/core/blockwise8.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "bnb/core/bf16_codes.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/stream_stores.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::Encode;
using tests::EveryIsa;
using tests::ExpectSameBits;

PreparedCodebook DynamicCodebook() {
  auto map = CreateDynamicMap();
  auto cb = PrepareCodebook(map->data(), 256);
  return *cb;
}

// Unsorted, with duplicates, a cluster of values closer than one bucket and a midpoint at 0 (between +-1e-10):
// every lookup path of the bucket table is taken.
PreparedCodebook AwkwardCodebook() {
  std::vector<float> code(256);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& c : code) c = u(rng);
  for (int i = 0; i < 40; ++i) code[i] = 0.5f + i * 1e-5f;  // many midpoints per bucket
  code[50] = code[60];
  code[70] = 1e-10f;
  code[71] = -1e-10f;
  return *PrepareCodebook(code.data(), 256);
}

int SearchBuckets(const PreparedCodebook& cb) {
  int n = 0;
  for (int32_t e : cb.buckets) n += (e & 0xFFFF) == PreparedCodebook::kSearch;
  return n;
}

TEST(BucketTable, DynamicMapNeedsNoSearchAwkwardOneDoes) {
  // Entries between the two signs' ranges are never read and also hold kSearch: count beyond those.
  const int unused = PreparedCodebook::kNegativeBuckets - PreparedCodebook::kPositiveBuckets;
  EXPECT_EQ(SearchBuckets(DynamicCodebook()), unused);
  EXPECT_GT(SearchBuckets(AwkwardCodebook()), unused);
  EXPECT_FALSE(DynamicCodebook().needs_search);
  EXPECT_TRUE(AwkwardCodebook().needs_search);
  // So the float quantizers take both ways on the x86 targets: HalfBuckets, and the coders without it.
  EXPECT_FALSE(DynamicCodebook().half_buckets.entries.empty());
  EXPECT_TRUE(AwkwardCodebook().half_buckets.entries.empty());
}

std::vector<float> TestData(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng) * 3.0f;
  if (specials && n > 600) {
    tests::AddSpecialValues(v);
  }
  return v;
}

// The codes and absmax of x (n elements of `dtype`, blocks of bs) by the dispatched kernel and by the scalar
// definition.
struct BothQuantized {
  Blockwise8Range r;
  std::vector<uint8_t> codes, codes_ref;
  std::vector<float> absmax, absmax_ref;
};
BothQuantized QuantizeBoth(DType dtype, const void* x, int64_t n, int64_t bs, const PreparedCodebook& cb) {
  BothQuantized q{Blockwise8Range{n, bs, 0, NumBlocks(n, bs)}, std::vector<uint8_t>(n), std::vector<uint8_t>(n),
                  std::vector<float>(NumBlocks(n, bs)), std::vector<float>(NumBlocks(n, bs))};
  QuantizeBlockwise8(dtype, x, cb, q.r, q.codes.data(), q.absmax.data());
  QuantizeBlockwise8Scalar(dtype, x, cb, q.r, q.codes_ref.data(), q.absmax_ref.data());
  return q;
}

TEST_P(EveryIsa, DispatchFollowsTheCap) { EXPECT_EQ(ActiveIsa(), GetParam()); }

TEST_P(EveryIsa, EqualsScalarExactly) {
  for (const PreparedCodebook& cb : {DynamicCodebook(), AwkwardCodebook()})
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int64_t bs = kMinBlocksize; bs <= kMaxBlocksize; bs *= 2) {
      for (int64_t n : {int64_t{1}, int64_t{31}, bs * 3 + 17, int64_t{10007}}) {
        SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " blocksize " << bs << " n " << n);
        const auto x = Encode(dtype, TestData(n, static_cast<uint32_t>(n + bs), /*specials=*/true));
        const BothQuantized q = QuantizeBoth(dtype, x.data(), n, bs, cb);
        ASSERT_EQ(q.codes, q.codes_ref);
        for (int64_t b = 0; b < q.r.block_end; ++b) {
          ASSERT_EQ(FloatToBits(q.absmax[b]), FloatToBits(q.absmax_ref[b])) << b;
        }

        std::vector<uint8_t> out(n * DTypeSize(dtype)), out_ref(n * DTypeSize(dtype));
        DequantizeBlockwise8(dtype, q.codes.data(), q.absmax.data(), cb, q.r, out.data());
        DequantizeBlockwise8Scalar(dtype, q.codes.data(), q.absmax.data(), cb.values.data(), q.r, out_ref.data());
        ExpectSameBits(dtype, out, out_ref, n);
      }
    }
  }
}

// Quotients at the ends of float32's range: blocks whose absmax lies outside [2^-100, 2^100], elements below 2^-100
// or whose quotient is, subnormals, zeros of both signs (where a division by products would need its guard,
// quotient.h); a codebook of powers of two down to 2^-126, so a quotient an ulp off anywhere in that range changes a
// code. float32 and bfloat16.
TEST_P(EveryIsa, TinyAndHugeQuotientsEqualScalar) {
  std::vector<float> code(256, 0.0f);
  for (int k = 0; k < 127; ++k) code[2 * k] = std::ldexp(1.0f, -k), code[2 * k + 1] = -std::ldexp(1.0f, -k);
  const PreparedCodebook cb = *PrepareCodebook(code.data(), 256);
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> exponent(-149, 127);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  const int64_t bs = 64;
  std::vector<float> x;
  const auto block = [&](float absmax, int lo, int hi) {  // absmax first, then elements 2^lo .. 2^hi at random
    x.push_back(absmax);
    std::uniform_int_distribution<int> e(lo, hi);
    for (int64_t i = 1; i < bs; ++i) {
      const float v = i % 9 == 0 ? 0.0f : i % 13 == 0 ? -0.0f : std::ldexp(mantissa(rng), e(rng));
      x.push_back(i % 2 ? -v : v);
    }
  };
  block(0x1.8p+126f, -149, 0);     // quotients down past the subnormals
  block(0x1.8p+101f, -60, 90);     // absmax above 2^100
  block(0x1.3p-101f, -149, -102);  // absmax below 2^-100
  block(1.7f, -110, -95);          // elements around 2^-100
  block(0x1p-90f, -149, -91);      // a tiny block: residuals near the subnormals
  for (int k = 0; k < 200; ++k) {  // random exponents everywhere
    const int top = exponent(rng);
    block(std::ldexp(mantissa(rng), top), -149, top - 1);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const auto data = Encode(dtype, x);
    const BothQuantized q = QuantizeBoth(dtype, data.data(), n, bs, cb);
    ASSERT_EQ(q.codes, q.codes_ref);
  }
}

// Blocks larger than 4096 (the CPU kernels take them, as bitsandbytes' CPU path does): bfloat16 ones go by their
// tables kMaxBlocksize elements at a time; a ragged last block, special values and a thread's sub-range.
TEST_P(EveryIsa, LargeBlocksEqualScalar) {
  const PreparedCodebook cb = DynamicCodebook();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int64_t bs : {int64_t{8192}, int64_t{16384}, int64_t{1} << 16}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " blocksize " << bs);
      const int64_t n = bs * 3 + 4099;
      const auto x = Encode(dtype, TestData(n, static_cast<uint32_t>(bs), /*specials=*/true));
      const BothQuantized q = QuantizeBoth(dtype, x.data(), n, bs, cb);
      ASSERT_EQ(q.codes, q.codes_ref);
      ASSERT_EQ(std::memcmp(q.absmax.data(), q.absmax_ref.data(), q.absmax.size() * sizeof(float)), 0);
      std::vector<uint8_t> part(n);
      std::vector<float> am(q.absmax.size());
      QuantizeBlockwise8(dtype, x.data(), cb, {n, bs, 1, 3}, part.data(), am.data());
      ASSERT_TRUE(std::equal(part.begin() + bs, part.begin() + 3 * bs, q.codes_ref.begin() + bs));
      std::vector<uint8_t> out(n * DTypeSize(dtype)), out_ref(n * DTypeSize(dtype));
      DequantizeBlockwise8(dtype, q.codes.data(), q.absmax.data(), cb, q.r, out.data());
      DequantizeBlockwise8Scalar(dtype, q.codes.data(), q.absmax.data(), cb.values.data(), q.r, out_ref.data());
      ExpectSameBits(dtype, out, out_ref, n);
    }
  }
}

// Threads take ranges of blocks; a range may start and end anywhere, and bfloat16 blocks are coded in groups of up to
// kMaxBlocksize elements counted from the range's start.
TEST_P(EveryIsa, SubrangesEqualTheWhole) {
  const PreparedCodebook cb = DynamicCodebook();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t bs : {int64_t{32}, int64_t{64}, int64_t{1024}}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " blocksize " << bs);
      const int64_t blocks = 301, n = bs * (blocks - 1) + 5;
      const auto x = Encode(dtype, TestData(n, 7, /*specials=*/true));
      std::vector<uint8_t> whole(n), parts(n);
      std::vector<float> am_whole(blocks), am_parts(blocks);
      QuantizeBlockwise8(dtype, x.data(), cb, {n, bs, 0, blocks}, whole.data(), am_whole.data());
      for (const auto& [b0, b1] : {std::pair<int64_t, int64_t>{0, 73}, {73, 74}, {74, 250}, {250, blocks}}) {
        QuantizeBlockwise8(dtype, x.data(), cb, {n, bs, b0, b1}, parts.data(), am_parts.data());
      }
      EXPECT_EQ(whole, parts);
      EXPECT_EQ(std::memcmp(am_whole.data(), am_parts.data(), blocks * sizeof(float)), 0);  // NaN blocks too
      const BothQuantized q = QuantizeBoth(dtype, x.data(), n, bs, cb);
      EXPECT_EQ(whole, q.codes_ref);
    }
  }
}

// Where a fast search could go wrong: every midpoint and its neighbours (ulps, and relative steps around the
// rounding margin), both signs, zero, subnormals, the binade window's floor, +-1, every bfloat16 value in [-1, 1],
// and a sweep of float bit patterns.
std::vector<float> HardValues(const PreparedCodebook& cb) {
  std::vector<float> v;
  const auto both_signs = [&](float x) {
    v.push_back(x);
    v.push_back(-x);
  };
  for (float m : cb.midpoints) {
    if (std::fabs(m) > 1.0f) continue;
    float up = m, down = m;
    for (int k = 0; k < 8; ++k, up = std::nextafter(up, 2.0f), down = std::nextafter(down, -2.0f)) {
      both_signs(up);
      both_signs(down);
    }
    for (float rel : {1e-6f, 3e-6f, 1e-5f, 3e-5f, 1e-4f, 1e-3f}) {
      both_signs(m * (1.0f + rel));
      both_signs(m * (1.0f - rel));
    }
  }
  for (float x : {0.0f, 1.0f, std::nextafter(1.0f, 0.0f), std::ldexp(1.0f, -149), std::ldexp(1.0f, -126), 1e-30f}) {
    both_signs(x);
  }
  for (float x = std::ldexp(1.0f, -15), k = 0; k < 8; ++k, x = std::nextafter(x, 0.0f)) both_signs(x);
  for (uint32_t h = 0; h <= 0x3F80; ++h) both_signs(BF16ToFloat(static_cast<uint16_t>(h)));
  for (uint32_t bits = 0; bits <= 0x3F800000u; bits += 4099) both_signs(BitsToFloat(bits));
  return v;
}

TEST_P(EveryIsa, HardValuesEqualScalarExactly) {
  const std::vector<float> uniform = [] {
    std::vector<float> c;
    for (int k = -127; k <= 128; ++k) c.push_back(static_cast<float>(k) / 127.0f);
    return c;
  }();
  for (const std::vector<float>& code : {*CreateDynamicMap(), *ComputeDynamicMap(false, 7, 8), uniform}) {
    const PreparedCodebook cb = *PrepareCodebook(code.data(), 256);
    // Each hard value alone in a slot of 16 (the widest vector) filled with 1.0, which no coder flags: a neighbour
    // flagged for the exact redo would redo the whole vector and hide a wrong lane. Blocks start with 1.0, so
    // absmax is 1 and the values are quantized as they are.
    const std::vector<float> hard = HardValues(cb);
    const int64_t bs = 4096, kSlot = 16;
    std::vector<float> x;
    for (size_t i = 0; i < hard.size(); ++i) {
      if (x.size() % bs == 0) x.insert(x.end(), kSlot, 1.0f);
      x.push_back(hard[i]);
      x.insert(x.end(), kSlot - 1, 1.0f);
    }
    const int64_t n = static_cast<int64_t>(x.size());
    const BothQuantized q = QuantizeBoth(DType::kFloat32, x.data(), n, bs, cb);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(q.codes[i], q.codes_ref[i]) << "x = " << x[i] << " (bits " << std::hex << FloatToBits(x[i]) << ")";
    }
  }
}

// A negative value whose magnitude is exactly a split that is not the mirror of the negative one (issue 21): 12.5
// leads the block, so -1.28515625 scales to -0.1028125, which AVX-512's segment coder once sent to code 63.
TEST_P(EveryIsa, NegativeValueAtAnInexactSplit) {
  const PreparedCodebook cb = DynamicCodebook();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    std::vector<float> x(64, 0.0f);
    x[0] = 12.5f;
    x[1] = -1.28515625f;
    const std::vector<uint8_t> raw = Encode(dtype, x);
    const BothQuantized q = QuantizeBoth(dtype, raw.data(), 64, 64, cb);
    if (dtype != DType::kBFloat16) {
      EXPECT_EQ(q.codes_ref[1], 64);  // bfloat16 rounds -1.28515625
    }
    EXPECT_EQ(q.codes[1], q.codes_ref[1]) << DTypeName(dtype);
  }
}

// bfloat16 input by table (bf16_codes.h): every bfloat16 magnitude up to the absmax against the scalar definition,
// for the absmax values of tests::Bf16AbsmaxCases.
TEST_P(EveryIsa, EveryBfloat16EqualsScalar) {
  for (const std::vector<float>& code : {*CreateDynamicMap(), *ComputeDynamicMap(false, 7, 8)}) {
    const PreparedCodebook cb = *PrepareCodebook(code.data(), 256);
    ASSERT_NE(cb.bf16_codes, nullptr);
    for (const uint16_t a : tests::Bf16AbsmaxCases(cb.bf16_codes->rows())) {
      SCOPED_TRACE(testing::Message() << "absmax bits " << std::hex << a);
      const int64_t bs = 4096;
      const std::vector<uint16_t> x = tests::Every16BitUpTo(a, bs);
      const int64_t n = static_cast<int64_t>(x.size());
      const BothQuantized q = QuantizeBoth(DType::kBFloat16, x.data(), n, bs, cb);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(q.codes[i], q.codes_ref[i]) << "x bits " << std::hex << x[i];
    }
  }
}

// float16 input (AVX-512 scales it without a division, f16_quotient.h): every float16 magnitude up to the absmax
// against the scalar definition, in both codebooks, for absmax values of every third exponent with mantissas 0, 1,
// 512 and 1023 (subnormal ones too), and for every third mantissa in [1, 2): a quotient off by an ulp changes a
// code only near a midpoint, which few absmax values put a float16 at.
TEST_P(EveryIsa, EveryFloat16EqualsScalar) {
  std::vector<uint16_t> amaxes;
  for (int e = 0; e < 31; e += 3) {
    for (const int m : {0, 1, 512, 1023}) {
      if (e > 0 || m > 0) amaxes.push_back(static_cast<uint16_t>(e << 10 | m));
    }
  }
  for (int m = 2; m < 1024; m += 3) amaxes.push_back(static_cast<uint16_t>(15 << 10 | m));
  for (const PreparedCodebook& cb : {DynamicCodebook(), AwkwardCodebook()}) {
    for (const uint16_t a : amaxes) {
      SCOPED_TRACE(testing::Message() << "absmax bits " << std::hex << a);
      const std::vector<uint16_t> x = tests::Every16BitUpTo(a, 4096);
      const int64_t n = static_cast<int64_t>(x.size());
      for (const int64_t bs : {int64_t{64}, int64_t{4096}}) {
        const BothQuantized q = QuantizeBoth(DType::kFloat16, x.data(), n, bs, cb);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(q.codes[i], q.codes_ref[i]) << "bs " << bs << " x bits " << x[i];
      }
    }
  }
}

// Every code under every kind of absmax (0, tiny, NaN, inf, finite), in every output type and blocksize, into an output
// that starts off any vector boundary: 16-bit outputs of large blocks come from per-block tables of the 256 outputs.
TEST_P(EveryIsa, EveryCodeDequantizesAsScalar) {
  const PreparedCodebook cb = AwkwardCodebook();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int64_t bs = kMinBlocksize; bs <= kMaxBlocksize; bs *= 2) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " blocksize " << bs);
      const int64_t n = std::max<int64_t>(bs * 7, 2048) + 13;
      std::mt19937 rng(static_cast<uint32_t>(bs));
      std::vector<uint8_t> codes(n);
      for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : rng());
      const Blockwise8Range r{n, bs, 0, NumBlocks(n, bs)};
      std::vector<float> absmax = tests::TestAbsmax(std::max<int64_t>(r.block_end, 8), rng);
      absmax[0] = 0.0f;
      absmax[1] = 1.0e-38f;  // products below the smallest normal float: rounded as they are, not taken as zero
      const int64_t bytes = n * DTypeSize(dtype);
      std::vector<uint8_t> out(bytes + DTypeSize(dtype)), out_ref(bytes);
      DequantizeBlockwise8(dtype, codes.data(), absmax.data(), cb, r, out.data() + DTypeSize(dtype));
      DequantizeBlockwise8Scalar(dtype, codes.data(), absmax.data(), cb.values.data(), r, out_ref.data());
      ExpectSameBits(dtype, std::vector<uint8_t>(out.begin() + DTypeSize(dtype), out.end()), out_ref, n);
    }
  }
}

// bfloat16 outputs of blocks below 512 on AVX512-BF16 CPUs: a range whose products are all zero, normal or infinite
// is rounded by vcvtne2ps2bf16, any other by Round16 (blockwise8_x86.cc); both bit for bit as the scalar definition,
// NaN's bits included. Each special absmax below, alone in a range of normal ones, makes vcvtne2ps2bf16 wrong there
// (it flushes subnormal products and keeps a NaN's sign), so a range that took it anyway fails; the boundary (the
// least absmax whose least product is normal) and wide magnitudes take it.
TEST_P(EveryIsa, Bfloat16RangesRoundAsScalar) {
  const PreparedCodebook cb = DynamicCodebook();
  float least = INFINITY;
  for (float v : cb.values) {
    if (v != 0.0f) least = std::min(least, std::fabs(v));
  }
  float boundary = FLT_MIN / least;
  while (boundary * least < FLT_MIN) boundary = std::nextafter(boundary, INFINITY);
  while (std::nextafter(boundary, 0.0f) * least >= FLT_MIN) boundary = std::nextafter(boundary, 0.0f);
  const float specials[] = {1.0f,     0.0f,      -0.0f,    boundary, -boundary, std::nextafter(boundary, 0.0f),
                            1.0e-38f, FLT_MIN,   -3.5f,    1.0e30f,  FLT_MAX,   INFINITY,
                            -INFINITY, NAN};
  for (int64_t bs : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}}) {
    const int64_t n = bs * 40 + 7;
    const Blockwise8Range r{n, bs, 0, NumBlocks(n, bs)};
    std::mt19937 rng(static_cast<uint32_t>(bs) + 5);
    std::vector<uint8_t> codes(n);
    for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(i < 512 ? i : rng());
    std::vector<float> absmax(r.block_end);
    std::uniform_real_distribution<float> exponent(-100.0f, 100.0f);
    for (auto& a : absmax) a = std::exp2(exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    for (float special : specials) {
      SCOPED_TRACE(testing::Message() << "blocksize " << bs << ", absmax " << special);
      absmax[17] = special;
      std::vector<uint16_t> out(n), out_ref(n);
      DequantizeBlockwise8(DType::kBFloat16, codes.data(), absmax.data(), cb, r, out.data());
      DequantizeBlockwise8Scalar(DType::kBFloat16, codes.data(), absmax.data(), cb.values.data(), r, out_ref.data());
      ASSERT_EQ(std::memcmp(out.data(), out_ref.data(), n * sizeof(uint16_t)), 0);
    }
  }
}

// Outputs of kStreamFromBytes and more moved, 64-byte aligned, are written with streaming stores: still exactly the
// scalar values (16-bit outputs: small blocks by products and rounding, large ones by per-block tables).
TEST_P(EveryIsa, LargeAlignedOutputsEqualScalar) {
  const PreparedCodebook cb = DynamicCodebook();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
  for (int64_t bs : {int64_t{64}, int64_t{4096}}) {
    const int64_t n = kStreamFromBytes / DTypeSize(dtype) + 1000;
    SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " blocksize " << bs);
    std::vector<uint8_t> codes(n);
    std::mt19937 rng(3);
    for (auto& c : codes) c = static_cast<uint8_t>(rng());
    const std::vector<float> absmax = tests::TestAbsmax(NumBlocks(n, bs), rng);
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    tests::Aligned64 aligned(bytes);
    uint8_t* out = aligned.data();
    std::vector<uint8_t> out_ref(bytes);
    const Blockwise8Range r{n, bs, 0, NumBlocks(n, bs)};
    DequantizeBlockwise8(dtype, codes.data(), absmax.data(), cb, r, out);
    DequantizeBlockwise8Scalar(dtype, codes.data(), absmax.data(), cb.values.data(), r, out_ref.data());
    ASSERT_EQ(std::memcmp(out, out_ref.data(), bytes), 0);
  }
}

// Quantizing input of kStreamFromBytes and more moved into 64-byte aligned codes streams the codes: bfloat16's of the blocks
// coded by table (blocks that are searched - zeros, NaN, inf among the special values - store theirs plainly in
// between), float32's and float16's of whole groups of four vectors (HalfBuckets on x86; BucketCoder's Stream4 on
// Intel's AVX-512, bfloat16's blocks of 64 too).
TEST_P(EveryIsa, LargeAlignedCodesEqualScalar) {
  const PreparedCodebook cb = DynamicCodebook();
  for (DType dtype : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
    const int64_t n = kStreamFromBytes / (DTypeSize(dtype) + 1) + 1001;
    const auto x = Encode(dtype, TestData(n, 11, /*specials=*/true));
    for (int64_t bs : {int64_t{64}, int64_t{4096}}) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << ", blocksize " << bs);
      const Blockwise8Range r{n, bs, 0, NumBlocks(n, bs)};
      tests::Aligned64 codes(static_cast<size_t>(n));
      std::vector<uint8_t> codes_ref(n);
      std::vector<float> absmax(r.block_end), absmax_ref(r.block_end);
      QuantizeBlockwise8(dtype, x.data(), cb, r, codes.data(), absmax.data());
      QuantizeBlockwise8Scalar(dtype, x.data(), cb, r, codes_ref.data(), absmax_ref.data());
      ASSERT_EQ(std::memcmp(codes.data(), codes_ref.data(), n), 0);
      ASSERT_EQ(std::memcmp(absmax.data(), absmax_ref.data(), absmax.size() * sizeof(float)), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blockwise8, EveryIsa, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

TEST(Blockwise8Policy, SpecialValues) {
  const PreparedCodebook cb = DynamicCodebook();
  std::vector<float> x(96, 0.5f);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // block 0: zeros
  x[40] = NAN;                                // block 1: NaN
  x[70] = INFINITY;                           // block 2: inf
  x[71] = -INFINITY;
  const Blockwise8Range r{96, 32, 0, 3};
  std::vector<uint8_t> codes(96);
  std::vector<float> absmax(3), out(96);
  QuantizeBlockwise8(DType::kFloat32, x.data(), cb, r, codes.data(), absmax.data());
  DequantizeBlockwise8(DType::kFloat32, codes.data(), absmax.data(), cb, r, out.data());
  EXPECT_EQ(absmax[0], 0.0f);
  EXPECT_TRUE(std::isnan(absmax[1]));
  EXPECT_TRUE(std::isinf(absmax[2]));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.0f);
  for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  EXPECT_EQ(out[70], INFINITY);
  EXPECT_EQ(out[71], -INFINITY);
  EXPECT_TRUE(std::isnan(out[64]));
}

TEST(Blockwise8Policy, BlocksizeChecks) {
  EXPECT_TRUE(CheckBlocksize(32).ok());
  EXPECT_TRUE(CheckBlocksize(4096).ok());
  for (int64_t bad : {0, 16, 48, 8192, -64}) {
    absl::Status st = CheckBlocksize(bad);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(std::to_string(bad)), absl::string_view::npos) << st;
  }
  EXPECT_TRUE(CheckBlocksize(16384, kMaxCpuBlocksize8).ok());
  EXPECT_TRUE(CheckBlocksize(kMaxCpuBlocksize8, kMaxCpuBlocksize8).ok());
  EXPECT_FALSE(CheckBlocksize(kMaxCpuBlocksize8 * 2, kMaxCpuBlocksize8).ok());
  EXPECT_FALSE(CheckBlocksize(12288, kMaxCpuBlocksize8).ok());
}

}  // namespace
}  // namespace bnb::core
