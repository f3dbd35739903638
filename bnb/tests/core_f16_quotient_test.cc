// F16Quotient (bnb/core/f16_quotient.h): x / a without a division, equal to the rounded quotient bit for bit for
// every pair of float16 values the quantizers divide (0 <= |x| <= a, a > 0 finite).
#include "bnb/core/f16_quotient.h"

#include <cmath>
#include <cstdint>

#include "bnb/core/dtype.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

// All ~5e8 pairs with x >= 0 (a few seconds); the steps are odd in x, which the next test checks.
TEST(F16Quotient, EveryPairOfFloat16ValuesEqualsTheQuotient) {
  int64_t pairs = 0;
  for (uint32_t ab = 1; ab < 0x7C00; ++ab) {  // every positive finite float16, subnormals included
    const float a = HalfToFloat(static_cast<uint16_t>(ab));
    const float y = 1.0f / a;
    for (uint32_t xb = 0; xb <= ab; ++xb) {
      const float x = HalfToFloat(static_cast<uint16_t>(xb));
      const float q = F16Quotient(x, a, y), ref = x / a;
      if (FloatToBits(q) != FloatToBits(ref)) {
        FAIL() << "x " << std::hexfloat << x << " a " << a << ": " << q << ", the quotient " << ref;
      }
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, int64_t{503856639});
}

TEST(F16Quotient, OddInX) {
  for (const uint16_t ab : {uint16_t{0x0001}, uint16_t{0x03FF}, uint16_t{0x3C00}, uint16_t{0x3BFF}, uint16_t{0x7BFF}}) {
    const float a = HalfToFloat(ab), y = 1.0f / a;
    for (uint32_t xb = 0; xb <= ab; xb += 7) {
      const float x = HalfToFloat(static_cast<uint16_t>(xb));
      EXPECT_EQ(FloatToBits(F16Quotient(-x, a, y)), FloatToBits(-x / a)) << std::hexfloat << x << " " << a;
    }
  }
  // -0: the residual alone would answer +0.
  EXPECT_TRUE(std::signbit(F16Quotient(-0.0f, 1.0f, 1.0f)));
}

// The correction matters: q0 = x * y alone differs from the quotient for some pairs (so the test above can fail).
TEST(F16Quotient, TheProductAloneIsNotTheQuotient) {
  int64_t off = 0;
  for (uint32_t xb = 0x3800; xb < 0x3C00; ++xb) {
    const float a = HalfToFloat(0x3BFF), x = HalfToFloat(static_cast<uint16_t>(xb));
    off += FloatToBits(x * (1.0f / a)) != FloatToBits(x / a);
  }
  EXPECT_GT(off, 0);
}

}  // namespace
}  // namespace bnb::core
