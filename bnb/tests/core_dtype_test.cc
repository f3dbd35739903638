#include "bnb/core/dtype.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace bnb::core {
namespace {

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "half bits " << h;
  }
}

TEST(Half, WideningIsExact) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0xFC00), -INFINITY);
}

// Compare with the compiler's own _Float16 conversion (IEEE round-to-nearest-even) on random float bits.
TEST(Half, NarrowingMatchesCompiler) {
#if defined(__FLT16_MAX__)
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const float f = BitsToFloat(rng());
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &ref, 2);
    ASSERT_EQ(FloatToHalf(f), bits) << "float bits " << FloatToBits(f);
  }
  // Ties between neighbouring halves go to the even one.
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const double mid = (double(HalfToFloat(h)) + double(HalfToFloat(h + 1))) / 2;
    EXPECT_EQ(FloatToHalf(static_cast<float>(mid)), (h & 1) ? h + 1 : h) << h;
  }
#else
  GTEST_SKIP() << "compiler has no _Float16";
#endif
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(BitsToFloat(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(FloatToBF16(BitsToFloat(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBF16(BitsToFloat(0x3F808001)), 0x3F81);
  EXPECT_EQ(FloatToBF16(NAN), 0x7FC0);
  EXPECT_EQ(FloatToBF16(BitsToFloat(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
  EXPECT_EQ(BF16ToFloat(0xBF80), -1.0f);
}

}  // namespace
}  // namespace bnb::core
