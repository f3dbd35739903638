// QuotientByProducts (bnb/core/quotient.h): x / a without a division, equal to the rounded quotient bit for bit for
// every pair of float16 values the quantizers divide (0 <= |x| <= a, a > 0 finite), and for float32 pairs wherever
// QuotientTakesDivision does not hand them to the division.
#include "bnb/core/quotient.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bnb/core/dtype.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

// All ~5e8 pairs with x >= 0 (a few seconds); the steps are odd in x, which the next test checks.
TEST(QuotientByProducts, EveryPairOfFloat16ValuesEqualsTheQuotient) {
  int64_t pairs = 0;
  for (uint32_t ab = 1; ab < 0x7C00; ++ab) {  // every positive finite float16, subnormals included
    const float a = HalfToFloat(static_cast<uint16_t>(ab));
    const float y = 1.0f / a;
    for (uint32_t xb = 0; xb <= ab; ++xb) {
      const float x = HalfToFloat(static_cast<uint16_t>(xb));
      const float q = QuotientByProducts(x, a, y), ref = x / a;
      if (FloatToBits(q) != FloatToBits(ref)) {
        FAIL() << "x " << std::hexfloat << x << " a " << a << ": " << q << ", the quotient " << ref;
      }
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, int64_t{503856639});
}

TEST(QuotientByProducts, OddInX) {
  for (const uint16_t ab : {uint16_t{0x0001}, uint16_t{0x03FF}, uint16_t{0x3C00}, uint16_t{0x3BFF}, uint16_t{0x7BFF}}) {
    const float a = HalfToFloat(ab), y = 1.0f / a;
    for (uint32_t xb = 0; xb <= ab; xb += 7) {
      const float x = HalfToFloat(static_cast<uint16_t>(xb));
      EXPECT_EQ(FloatToBits(QuotientByProducts(-x, a, y)), FloatToBits(-x / a)) << std::hexfloat << x << " " << a;
    }
  }
  // -0: the residual alone would answer +0.
  EXPECT_TRUE(std::signbit(QuotientByProducts(-0.0f, 1.0f, 1.0f)));
}

// The correction matters: q0 = x * y alone differs from the quotient for some pairs (so the tests can fail).
TEST(QuotientByProducts, TheProductAloneIsNotTheQuotient) {
  int64_t off = 0;
  for (uint32_t xb = 0x3800; xb < 0x3C00; ++xb) {
    const float a = HalfToFloat(0x3BFF), x = HalfToFloat(static_cast<uint16_t>(xb));
    off += FloatToBits(x * (1.0f / a)) != FloatToBits(x / a);
  }
  EXPECT_GT(off, 0);
}

// One float32 pair: the products' quotient equals the division's wherever the guard claims it; counts the pairs
// the guard hands to the division, and among them those the products get wrong.
struct Tally {
  int64_t claimed = 0, divided = 0, wrong_unclaimed = 0;
};
::testing::AssertionResult Check(float x, float a, Tally& t) {
  const float y = 1.0f / a, q0 = x * y, q = QuotientByProducts(x, a, y), ref = x / a;
  const bool same = FloatToBits(q) == FloatToBits(ref) || (std::isnan(q) && std::isnan(ref));
  if (QuotientTakesDivision(x, a, q0, q)) {
    ++t.divided;
    t.wrong_unclaimed += !same;
    return ::testing::AssertionSuccess();
  }
  ++t.claimed;
  if (same) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "x " << std::hexfloat << x << " a " << a << ": " << q << ", the quotient "
                                       << ref;
}

// float32 divisors of every kind (mantissas all ones and all zeros, the optimizers' bias corrections, random ones
// over the exponent range), each against every mantissa of x at two exponents: the quotient near 1, and near 2^-60
// (small, still normal).
TEST(QuotientByProducts, Float32EveryMantissaAgainstChosenDivisors) {
  std::vector<float> divisors = {1.0f, 0x1.fffffep0f, 0x1.000002p0f, 3.0f, 0.1f, 0.7f, 0x1.fffffep+99f, 0x1p-100f};
  for (const int step : {1, 2, 10, 1000}) {
    divisors.push_back(static_cast<float>(std::sqrt(1.0 - std::pow(0.999, step))));  // Adam's c2
    divisors.push_back(static_cast<float>(1.0 - std::pow(0.9, step)));                // and c1
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exponent(-100, 99);
  for (int k = 0; k < 8; ++k) divisors.push_back(std::ldexp(1.0f + mantissa(rng) * 0x1p-23f, exponent(rng)));
  Tally t;
  for (const float a : divisors) {
    for (const int shift : {0, -60}) {
      const int e = std::ilogb(a) + shift;
      for (uint32_t m = 0; m < (1u << 23); ++m) {
        const float x = std::ldexp(1.0f + m * 0x1p-23f, e);
        ASSERT_TRUE(Check(x, a, t));
      }
    }
  }
  EXPECT_GT(t.claimed, int64_t{300000000});
}

// Random pairs over all of float32's range, zeros, subnormals, infinities and NaN included: claimed pairs equal
// the quotient, and the guard is not idle: some pairs it hands to the division are ones the products get wrong.
TEST(QuotientByProducts, Float32RandomPairsAndTheGuard) {
  std::mt19937 rng(12);
  std::uniform_int_distribution<uint32_t> bits;
  Tally t;
  for (int k = 0; k < 20000000; ++k) {
    float x = BitsToFloat(bits(rng)), a = BitsToFloat(bits(rng) & 0x7FFFFFFFu);
    if (k % 4 == 1) x = std::ldexp(x, -60);  // small quotients and residuals more often
    ASSERT_TRUE(Check(x, a, t));
  }
  for (const float x : {0.0f, -0.0f, 1.0f, -3.5f, INFINITY, -INFINITY, NAN, 0x1p-149f, 0x1p-120f}) {
    for (const float a : {0.0f, 1.0f, 0x1p-126f, 0x1p-149f, 0x1p+127f, INFINITY, NAN, 0x1.8p-101f}) {
      ASSERT_TRUE(Check(x, a, t));
    }
  }
  EXPECT_GT(t.claimed, int64_t{10000000});
  EXPECT_GT(t.wrong_unclaimed, 0);
}

}  // namespace
}  // namespace bnb::core
