// The vectorized optimizer updates equal their scalar definition bit for bit on every instruction set, for every rule,
// element type and option, on ranges that start and end anywhere; the definition gives hand-computed steps; the 8-bit
// update is dequantize, the 32-bit update, quantize.
#include "bnb/core/optim.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::Encode;
using tests::EveryIsa;
using tests::ExpectSameBits;

constexpr const char* kNames[] = {"adam", "lamb", "ademamix", "momentum", "lars", "lion", "rmsprop", "adagrad"};

std::vector<float> Normal(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Gradients with zeros (for skip_zeros), NaN, +-inf and subnormals.
std::vector<float> Grads(int64_t n, uint32_t seed) {
  std::vector<float> g = Normal(n, 0.5f, seed);
  for (int64_t i = 0; i < n; i += 5) g[i] = 0.0f;
  if (n > 40) {
    g[11] = NAN;
    g[12] = INFINITY;
    g[13] = -INFINITY;
    g[14] = std::ldexp(1.0f, -140);
    g[16] = -std::ldexp(1.0f, -130);
  }
  return g;
}

struct Case {
  OptimKind kind;
  OptimStep step;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* name : kNames) {
    const OptimKind kind = *ParseOptimizer(name);
    for (int64_t t : {1, 5}) {
      for (double wd : {0.0, 0.01}) {
        for (bool skip : {false, true}) {
          for (bool eight_bit : {false, true}) {
            OptimStep st = MakeOptimStep(kind.rule, eight_bit, 0.9, 0.999, 0.9999, 5.0, 1e-8, wd, t, 1e-3, 0.75, skip);
            if (!eight_bit && kind.rule != OptimRule::kAdEMAMix && t == 5) st.clip = 0.3f;  // a trust ratio
            cases.push_back({kind, st});
          }
        }
      }
    }
  }
  return cases;
}

TEST_P(EveryIsa, Update32EqualsScalar) {
  const int64_t n = 200;
  for (const Case& c : Cases()) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      // Ranges starting and ending off any vector boundary, and the whole.
      for (const auto& [i0, i1] : {std::pair<int64_t, int64_t>{0, n}, {3, 3}, {1, 2}, {5, 150}, {17, 199}}) {
        SCOPED_TRACE(testing::Message() << "rule " << static_cast<int>(c.kind.rule) << " " << DTypeName(dtype)
                                        << " eight_bit " << c.step.eight_bit << " skip " << c.step.skip_zeros
                                        << " range [" << i0 << ", " << i1 << ")");
        const std::vector<uint8_t> g = Encode(dtype, Grads(n, 1));
        std::vector<uint8_t> p = Encode(dtype, Normal(n, 1.0f, 2)), p_ref = p;
        std::vector<float> s1 = Normal(n, 0.1f, 3), s1b = Normal(n, 0.1f, 4), s2 = Normal(n, 0.01f, 5);
        for (float& x : s2) x = std::fabs(x);
        if (c.kind.rule == OptimRule::kRMSprop || c.kind.rule == OptimRule::kAdagrad) {
          for (float& x : s1) x = std::fabs(x);
        }
        s1[7] = NAN;
        std::vector<float> s1_ref = s1, s1b_ref = s1b, s2_ref = s2;
        const bool mix = c.kind.rule == OptimRule::kAdEMAMix;
        OptimizerUpdate32(c.step, dtype, g.data(), p.data(), s1.data(), mix ? s1b.data() : nullptr,
                          c.kind.two_states ? s2.data() : nullptr, i0, i1);
        optim_scalar::Update32(c.step, dtype, g.data(), p_ref.data(), s1_ref.data(), mix ? s1b_ref.data() : nullptr,
                               c.kind.two_states ? s2_ref.data() : nullptr, i0, i1);
        ExpectSameBits(dtype, p, p_ref, n);
        ExpectSameBits(DType::kFloat32, Encode(DType::kFloat32, s1), Encode(DType::kFloat32, s1_ref), n);
        ExpectSameBits(DType::kFloat32, Encode(DType::kFloat32, s1b), Encode(DType::kFloat32, s1b_ref), n);
        ExpectSameBits(DType::kFloat32, Encode(DType::kFloat32, s2), Encode(DType::kFloat32, s2_ref), n);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, EveryIsa, testing::ValuesIn(AvailableIsas()));

float AdamStep(double lr, double g, double p) {
  OptimStep st = MakeOptimStep(OptimRule::kAdam, false, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.0, 1, lr, 1.0, false);
  const float gf = static_cast<float>(g);
  float pf = static_cast<float>(p), m = 0.0f, v = 0.0f;
  optim_scalar::Update32(st, DType::kFloat32, &gf, &pf, &m, nullptr, &v, 0, 1);
  return pf;
}

TEST(OptimScalar, HandComputedSteps) {
  // Adam's first step moves p by lr * g / (|g| + eps): m_hat = g, v_hat = g^2.
  EXPECT_NEAR(AdamStep(0.1, 0.5, 1.0), 0.9, 1e-6);
  EXPECT_NEAR(AdamStep(0.1, -2.0, 1.0), 1.1, 1e-6);
  // Lion moves by lr * sign(b1 * m + (1 - b1) * g) and keeps m = b2 * m + (1 - b2) * g.
  OptimStep st = MakeOptimStep(OptimRule::kLion, false, 0.9, 0.99, 0.0, 0.0, 0.0, 0.0, 4, 0.01, 1.0, false);
  float g = -0.5f, p = 2.0f, m = 1.0f;  // 0.9 * 1 - 0.1 * 0.5 > 0
  optim_scalar::Update32(st, DType::kFloat32, &g, &p, &m, nullptr, nullptr, 0, 1);
  EXPECT_FLOAT_EQ(p, 1.99f);
  EXPECT_FLOAT_EQ(m, 0.99f - 0.005f);
  // skip_zeros: a zero gradient changes neither p nor the state.
  st.skip_zeros = true;
  g = 0.0f;
  optim_scalar::Update32(st, DType::kFloat32, &g, &p, &m, nullptr, nullptr, 0, 1);
  EXPECT_FLOAT_EQ(p, 1.99f);
  EXPECT_FLOAT_EQ(m, 0.985f);
}

TEST(OptimScalar, ClipIsTheTrustRatio) {
  EXPECT_EQ(OptimClip(4.0f, 1.0, 1.0, 0.0, false), 0.5f);  // sqrt(4) = 2 > limit 1
  EXPECT_EQ(OptimClip(0.25f, 1.0, 1.0, 0.0, false), 1.0f);
  EXPECT_EQ(OptimClip(16.0f, 0.5, 2.0, 1.0, true), 0.5f);  // limit 0.5 * 2 + eps 1 = 2, sqrt(16) = 4
}

TEST(OptimKinds, UnknownNamesListTheKnownOnes) {
  const auto kind = ParseOptimizer("adamw");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(std::string(kind.status().message()).find("unknown optimizer 'adamw'; expected one of: adam, lamb"),
            std::string::npos);
}

// The 8-bit update equals its three passes done one after the other over the whole tensor: for three blocks, the last
// partial, and for a tensor large enough to take the requantize a block at a time with prefetches (many chunks, the
// last partial), updated in two ranges of blocks as two threads would.
class Optim8Sizes : public testing::TestWithParam<int64_t> {};

TEST_P(Optim8Sizes, IsDequantizeUpdateQuantize) {
  const int64_t n = GetParam(), blocks = NumBlocks(n, kOptimizerBlocksize);
  std::vector<float> signed_map(256), unsigned_map(256);
  for (int i = 0; i < 256; ++i) {
    signed_map[i] = -1.0f + 2.0f * static_cast<float>(i) / 255.0f;
    unsigned_map[i] = static_cast<float>(i) / 255.0f;
  }
  const PreparedCodebook cb1 = *PrepareCodebook(signed_map.data(), 256);
  const PreparedCodebook cb2 = *PrepareCodebook(unsigned_map.data(), 256);
  const Blockwise8Range all{n, kOptimizerBlocksize, 0, blocks};
  std::vector<uint8_t> q1(n), q2(n);
  std::vector<float> a1(blocks), a2(blocks), s2 = Normal(n, 0.01f, 7);
  for (float& x : s2) x = std::fabs(x);
  QuantizeBlockwise8(DType::kFloat32, Normal(n, 0.1f, 6).data(), cb1, all, q1.data(), a1.data());
  QuantizeBlockwise8(DType::kFloat32, s2.data(), cb2, all, q2.data(), a2.data());
  const std::vector<float> g = Grads(n, 8);
  std::vector<float> p = Normal(n, 1.0f, 9), p_ref = p;
  std::vector<uint8_t> q1_ref = q1, q2_ref = q2;
  std::vector<float> a1_ref = a1, a2_ref = a2;
  const OptimStep st = MakeOptimStep(OptimRule::kAdam, true, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, 3, 1e-3, 1.0, true);
  const int64_t split = blocks / 2 + 1;  // not on a chunk's boundary
  for (const auto& [b0, b1] : {std::pair<int64_t, int64_t>{0, split}, {split, blocks}}) {
    OptimizerUpdate8(st, DType::kFloat32, g.data(), p.data(), q1.data(), nullptr, q2.data(), cb1, &cb2, a1.data(),
                     nullptr, a2.data(), n, b0, b1);
  }
  std::vector<float> m(n), v(n);
  DequantizeBlockwise8(DType::kFloat32, q1_ref.data(), a1_ref.data(), cb1, all, m.data());
  DequantizeBlockwise8(DType::kFloat32, q2_ref.data(), a2_ref.data(), cb2, all, v.data());
  optim_scalar::Update32(st, DType::kFloat32, g.data(), p_ref.data(), m.data(), nullptr, v.data(), 0, n);
  QuantizeBlockwise8(DType::kFloat32, m.data(), cb1, all, q1_ref.data(), a1_ref.data());
  QuantizeBlockwise8(DType::kFloat32, v.data(), cb2, all, q2_ref.data(), a2_ref.data());
  EXPECT_EQ(q1, q1_ref);
  EXPECT_EQ(q2, q2_ref);
  EXPECT_EQ(std::memcmp(a1.data(), a1_ref.data(), blocks * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a2.data(), a2_ref.data(), blocks * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(p.data(), p_ref.data(), n * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Sizes, Optim8Sizes,
                         testing::Values(2 * kOptimizerBlocksize + 77,
                                         (int64_t{1} << 18) + 3 * kOptimizerBlocksize + 77));

}  // namespace
}  // namespace bnb::core
