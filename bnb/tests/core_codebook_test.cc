#include "bnb/core/codebook.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bnb/core/dtype.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

TEST(DynamicMap, ShapeAndHandComputedEntries) {
  auto map = CreateDynamicMap();
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->size(), 256u);
  EXPECT_TRUE(std::is_sorted(map->begin(), map->end()));
  int pos = 0, neg = 0, zero = 0;
  for (float v : *map) (v > 0 ? pos : v < 0 ? neg : zero)++;
  EXPECT_EQ(pos, 128);  // 127 fractions + 1.0
  EXPECT_EQ(neg, 127);
  EXPECT_EQ(zero, 1);
  EXPECT_EQ(map->back(), 1.0f);
  // Exponent 10^-6 has one fraction: the mean of linspace(0.1, 1, 2) = 0.55, scaled in float32.
  EXPECT_EQ((*map)[128], static_cast<float>(1e-6) * 0.55f);
  EXPECT_EQ((*map)[127], 0.0f);
  EXPECT_EQ((*map)[126], -static_cast<float>(1e-6) * 0.55f);
  // The most negative value: exponent 10^0, the top fraction mean of linspace(0.1, 1, 65): (0.98594 + 1) / 2.
  const float step = (1.0f - 0.1f) / 64.0f;
  EXPECT_EQ((*map)[0], -((1.0f - step + 1.0f) / 2.0f));
}

// The pinned default and the algorithm agree bit for bit (linspace by fused multiply-adds, as torch's).
TEST(DynamicMap, AlgorithmMatchesThePinnedDefault) {
  auto computed = ComputeDynamicMap(true, 7, 8);
  ASSERT_TRUE(computed.ok());
  const std::vector<float> pinned = DefaultDynamicMap();
  for (int i = 0; i < 256; ++i) EXPECT_EQ(FloatToBits((*computed)[i]), FloatToBits(pinned[i])) << i;
}

TEST(DynamicMap, UnsignedAndBadArguments) {
  auto map = CreateDynamicMap(/*is_signed=*/false);
  ASSERT_TRUE(map.ok());
  EXPECT_GE(*std::min_element(map->begin(), map->end()), 0.0f);
  EXPECT_FALSE(CreateDynamicMap(true, 0, 8).ok());
  // bitsandbytes takes a signed map with more exponent bits than non-sign bits: its decades start lower.
  auto low = CreateDynamicMap(true, 8, 8);
  ASSERT_TRUE(low.ok());
  EXPECT_EQ((*low)[127], 0.0f);
  EXPECT_FLOAT_EQ((*low)[128], 0.55e-6f);  // its first decade has no means; the next: 10^-6 * (0.1 + 1) / 2
  auto bad = CreateDynamicMap(true, 7, 9);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("total_bits must be in 1..8"), absl::string_view::npos);
  auto short_map = CreateDynamicMap(false, 6, 8);  // bitsandbytes' assert: 128 + 64 + ... is not 256
  ASSERT_FALSE(short_map.ok());
  EXPECT_NE(short_map.status().message().find("create_dynamic_map(signed=False, max_exponent_bits=6, total_bits=8) "
                                              "describes"), absl::string_view::npos) << short_map.status();
}

std::vector<float> Ramp() {
  std::vector<float> code(256);
  for (int i = 0; i < 256; ++i) code[i] = (i - 128) / 128.0f;
  return code;
}

TEST(PrepareCodebook, RejectsBadCodebooks) {
  std::vector<float> code = Ramp();
  EXPECT_FALSE(PrepareCodebook(code.data(), 255).ok());
  code[7] = NAN;
  auto st = PrepareCodebook(code.data(), 256);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("code[7]"), absl::string_view::npos) << st.status();
  code[7] = INFINITY;
  EXPECT_FALSE(PrepareCodebook(code.data(), 256).ok());
}

TEST(NearestCode, HandComputedCases) {
  std::vector<float> code = Ramp();  // -1, -127/128, ..., 127/128
  auto cb = PrepareCodebook(code.data(), 256);
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(NearestCode(*cb, 0.0f), 128);
  EXPECT_EQ(NearestCode(*cb, 1.0f), 255);
  EXPECT_EQ(NearestCode(*cb, -1.0f), 0);
  EXPECT_EQ(NearestCode(*cb, 0.3f / 128), 128);
  EXPECT_EQ(NearestCode(*cb, 0.7f / 128), 129);
  EXPECT_EQ(NearestCode(*cb, 0.5f / 128), 128);  // a tie goes to the lower value
  EXPECT_EQ(NearestCode(*cb, NAN), 0);           // NaN goes to the lowest entry
}

// The dynamic map's codes 93 and 94 are -0.017031250521540642 and -0.014218750409781933 (float32): their true
// midpoint is -0.015625000465661287, but (c93 + c94) * 0.5f rounds to -0.015625 exactly, above it, so -0.015625
// is nearer c94 by 9.3e-10 and takes 94, where a rounded-midpoint rule gave 93.
TEST(NearestCode, AValueOnARoundedUpMidpointTakesTheNearerUpperCode) {
  const auto map = CreateDynamicMap();
  ASSERT_TRUE(map.ok());
  auto cb = PrepareCodebook(map->data(), 256);
  ASSERT_TRUE(cb.ok());
  ASSERT_EQ(((*map)[93] + (*map)[94]) * 0.5f, -0.015625f);
  EXPECT_EQ(NearestCode(*cb, -0.015625f), 94);
  EXPECT_EQ(NearestCode(*cb, std::nextafter(-0.015625f, -1.0f)), 93);
}

// SplitPoint(lo, hi) is the largest float at least as near lo as hi: 2t <= lo + hi < 2 * next(t), checked in long
// double, exact for these pairs (exponents at most 40 apart).
TEST(SplitPoint, IsTheLastFloatNearerTheLowerValue) {
  std::vector<std::pair<float, float>> pairs;
  for (const bool is_signed : {true, false}) {
    const auto map = CreateDynamicMap(is_signed);
    ASSERT_TRUE(map.ok());
    std::vector<float> v(map->begin(), map->end());
    std::sort(v.begin(), v.end());
    for (size_t i = 0; i + 1 < v.size(); ++i) pairs.push_back({v[i], v[i + 1]});
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 60);
  for (int k = 0; k < 200000; ++k) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    float a = unit(rng) * scale, b = k % 2 ? std::nextafter(a, INFINITY) : a + unit(rng) * scale;
    if (!(std::isfinite(a) && std::isfinite(b))) continue;
    pairs.push_back({std::min(a, b), std::max(a, b)});
  }
  pairs.push_back({-1e-45f, 1e-45f});
  pairs.push_back({1e-45f, 3e-45f});
  pairs.push_back({0.0f, 1e-45f});
  int above = 0;
  for (const auto& [lo, hi] : pairs) {
    const float t = SplitPoint(lo, hi);
    const long double sum = static_cast<long double>(lo) + hi;
    ASSERT_LE(2.0L * t, sum) << lo << " " << hi;
    ASSERT_GT(2.0L * std::nextafter(t, INFINITY), sum) << lo << " " << hi;
    above += t != (lo + hi) * 0.5f;
  }
  EXPECT_GT(above, 1000);  // the rounded midpoint is often the wrong split
}

TEST(NearestCode, UnsortedCodebookReturnsOriginalIndex) {
  std::vector<float> code = Ramp();
  std::reverse(code.begin(), code.end());  // code[i] = (127 - i) / 128
  auto cb = PrepareCodebook(code.data(), 256);
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(NearestCode(*cb, 0.0f), 127);
  EXPECT_EQ(NearestCode(*cb, -1.0f), 255);
  EXPECT_EQ(code[NearestCode(*cb, 0.26f)], 33 / 128.0f);
}

TEST(NearestCode, DuplicateValuesPickTheFirstCode) {
  std::vector<float> code(256, 0.0f);
  code[10] = 1.0f;
  code[20] = -1.0f;
  auto cb = PrepareCodebook(code.data(), 256);
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(NearestCode(*cb, 0.1f), 0);
  EXPECT_EQ(NearestCode(*cb, 0.9f), 10);
  EXPECT_EQ(NearestCode(*cb, -0.9f), 20);
}

// k / 127 for k = -127..128: one arithmetic run, and one positive value more than there are negatives.
std::vector<float> UniformCodebook() {
  std::vector<float> code;
  for (int k = -127; k <= 128; ++k) code.push_back(static_cast<float>(k) / 127.0f);
  return code;
}

// The code HalfBuckets gives value bits `bits` (a scaled value in [-1, 1]), by its documented rule.
int HalfBucketCode(const PreparedCodebook& cb, uint32_t bits) {
  const uint32_t entry = static_cast<uint32_t>(cb.half_buckets.entries[bits >> HalfBuckets::kShift]);
  return static_cast<int>(((bits & 0xFFFF) > (entry & 0xFFFF) ? entry << 8 : entry) >> 24);
}

TEST(HalfBuckets, EveryBucketAgreesWithNearestCode) {
  std::mt19937 rng(5);
  for (const std::vector<float>& code : {*CreateDynamicMap(), *ComputeDynamicMap(false, 7, 8), UniformCodebook()}) {
    auto cb = PrepareCodebook(code.data(), 256);
    ASSERT_EQ(cb->half_buckets.entries.size(), static_cast<size_t>(HalfBuckets::kEntries));
    int steps = 0;
    for (uint32_t b = 0; b < HalfBuckets::kEntries; ++b) {
      if ((b & 0x7FFF) > 0x3F80) continue;  // beyond +-1.0f
      const uint32_t split = static_cast<uint32_t>(cb->half_buckets.entries[b]) & 0xFFFF;
      steps += split != 0xFFFF;
      for (uint32_t key : {0u, split, std::min(split + 1, 0xFFFFu), 0xFFFFu, uint32_t(rng() & 0xFFFF)}) {
        const uint32_t bits = b << HalfBuckets::kShift | key;
        ASSERT_EQ(HalfBucketCode(*cb, bits), NearestCode(*cb, BitsToFloat(bits))) << std::hex << "bits " << bits;
      }
    }
    // Most of the 255 midpoints fall inside a bucket (the rest at a bucket's end, where no split is needed).
    EXPECT_GT(steps, 230);
  }
}

TEST(HalfBuckets, EmptyWhenABucketHoldsTwoMidpoints) {
  std::vector<float> code = UniformCodebook();
  code[0] = 0.5f + 1e-5f;  // 0.5, 0.50001 and 0.50787 in one bucket's reach: two midpoints within 2^-8
  code[1] = 0.5f + 2e-5f;
  auto cb = PrepareCodebook(code.data(), 256);
  ASSERT_TRUE(cb.ok());
  EXPECT_TRUE(cb->half_buckets.entries.empty());
}

}  // namespace
}  // namespace bnb::core
