// The CUDA 8-bit optimizer update (bnb/jit/kernels/optim.cuh) run on the CPU by cuda_emu.h, against bnb/core's
// update bit for bit, no GPU needed: every cuda.optim8_per_thread value (1, 2, 4, 8), rules with one, two and three
// states, float32 / float16 / bfloat16 parameters, whole and partial last blocks, aligned and misaligned buffers,
// skip_zeros, a grid smaller than the tiles (the CTAs stride); the codebooks prepared by prepare_codebook8, as on
// the GPU.
#include "bnb/tests/cuda_emu.h"
// The kernels as host C++ (after the emulator, which defines what they need).
#include "bnb/jit/optim_host.h"
#include "bnb/tests/cuda_emu_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/dtype.h"
#include "bnb/core/optim.h"
#include "bnb/jit/optim.h"
#include "gtest/gtest.h"

namespace bnb {
namespace {

using core::DType;
using core::OptimRule;

constexpr int64_t kBs = core::kOptimizerBlocksize;

struct Case {
  OptimRule rule;
  DType dtype;
  int per;
  int64_t n;
  int64_t misalign;  // elements (p, g) and bytes (codes) past a 16-byte boundary, for those `misaligned` names
  bool skip_zeros;
  unsigned ctas;
  const char* misaligned = "gpq";  // g, p, the codes (q)
};

std::string Name(const Case& c) {
  return absl::StrCat("rule ", static_cast<int>(c.rule), " dtype ", core::DTypeName(c.dtype), " per ", c.per, " n ",
                      c.n, " misalign ", c.misalign, " of ", c.misaligned, " skip_zeros ", c.skip_zeros, " ctas ",
                      c.ctas);
}

// optimizer_update8's arguments (kernels/optim.cuh), and the grid.
struct Args {
  const void* g;
  void* p;
  uint8_t *q1, *q1b, *q2;
  const bw8::Prepared *prep1, *prep2;
  const float *qmap1, *qmap2;
  float *am1, *am1b, *am2;
  opt::Scalars st;
  int64_t n;
  unsigned ctas;
};

// The kernel over elements [from, from + count), every buffer advanced as bnb/jit/optim.cc's launcher does.
template <class T, int kRule, int kPer, bool kWhole>
void LaunchPart(const Args& a, int64_t from, int64_t count) {
  const int64_t blocks = from / kBs;
  const auto at = [from](uint8_t* q) { return q != nullptr ? q + from : nullptr; };
  const auto block_at = [blocks](float* m) { return m != nullptr ? m + blocks : nullptr; };
  emu::Launch(a.ctas, 256, optimizer_update8<T, kRule, 256, kPer, kWhole>, static_cast<const T*>(a.g) + from,
              static_cast<T*>(a.p) + from, at(a.q1), at(a.q1b), at(a.q2), a.prep1, a.prep2, a.qmap1, a.qmap2,
              block_at(a.am1), block_at(a.am1b), block_at(a.am2), a.st, static_cast<long long>(count));
}

// As the launcher plans it (jit::PlanUpdate8): whole blocks by the WHOLE variant where it applies, the rest by the
// general one.
template <class T, int kRule, int kPer>
void LaunchUpdate8(const Args& a) {
  const jit::Update8Plan plan =
      jit::PlanUpdate8(emu::DTypeOf<T>(), kPer, a.n, a.g, a.p, a.q1, a.q1b, a.q2);
  if constexpr (kPer * sizeof(T) % 16 == 0) {
    if (plan.whole > 0) LaunchPart<T, kRule, kPer, true>(a, 0, plan.whole);
  } else {
    ASSERT_EQ(plan.whole, 0);
  }
  if (plan.rest > 0) LaunchPart<T, kRule, kPer, false>(a, plan.whole, plan.rest);
}

template <class T, int kRule>
void ByPer(int per, const Args& a) {
  switch (per) {
    case 1: return LaunchUpdate8<T, kRule, 1>(a);
    case 2: return LaunchUpdate8<T, kRule, 2>(a);
    case 4: return LaunchUpdate8<T, kRule, 4>(a);
    default: return LaunchUpdate8<T, kRule, 8>(a);
  }
}

template <class T>
void ByRule(OptimRule rule, int per, const Args& a) {
  switch (rule) {
    case OptimRule::kAdam: return ByPer<T, opt::kAdam>(per, a);
    case OptimRule::kAdEMAMix: return ByPer<T, opt::kAdEMAMix>(per, a);
    case OptimRule::kLion: return ByPer<T, opt::kLion>(per, a);
    default: return ByPer<T, opt::kMomentum>(per, a);
  }
}

// prepare_codebook8 run as the GPU runs it (one CTA of 256).
bw8::Prepared Prepare(const std::vector<float>& code) {
  alignas(16) static bw8::Prepared prep;
  emu::Launch(1, 256, prepare_codebook8<256>, code.data(), &prep);
  return prep;
}

void Check(const Case& c) {
  SCOPED_TRACE(Name(c));
  const bool two = c.rule == OptimRule::kAdam || c.rule == OptimRule::kAdEMAMix;
  const bool mix = c.rule == OptimRule::kAdEMAMix;
  const int64_t n = c.n, blocks = (n + kBs - 1) / kBs, size = core::DTypeSize(c.dtype);
  const std::vector<float> signed_map = *core::CreateDynamicMap(true), unsigned_map = *core::CreateDynamicMap(false);
  const core::PreparedCodebook cb1 = *core::PrepareCodebook(signed_map.data(), 256);
  const core::PreparedCodebook cb2 = *core::PrepareCodebook(unsigned_map.data(), 256);

  std::mt19937 rng(static_cast<unsigned>(n * 31 + c.per));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto off = [&](char which) { return std::strchr(c.misaligned, which) != nullptr ? c.misalign : 0; };
  emu::GuardedBuffer g(n * size, off('g') * size), p(n * size, off('p') * size);
  emu::GuardedBuffer q1(2 * n, off('q')), q2(n, off('q'));
  for (int64_t i = 0; i < n; ++i) {
    core::StoreFromFloat(c.dtype, p.data(), i, normal(rng));
    core::StoreFromFloat(c.dtype, g.data(), i, i % 7 == 3 ? 0.0f : 0.5f * normal(rng));  // zeros for skip_zeros
  }
  // States quantized as the CPU would have left them: m (and m2) signed, v unsigned.
  std::vector<float> m(2 * n), v(n), am1(2 * blocks), am2(blocks);
  for (float& x : m) x = 0.1f * normal(rng);
  for (float& x : v) x = 0.01f * std::fabs(normal(rng));
  // Requantize's rare routes: values whose quotient by the block's absmax is below 2^-19 (every 13th), and a block
  // of zeros (absmax 0: no table at all) where there is a second block.
  for (int64_t i = 5; i < n; i += 13) m[i] *= 1e-7f, m[n + i] *= 1e-7f, v[i] *= 1e-7f;
  for (int64_t i = kBs; i < std::min(n, 2 * kBs); ++i) {
    m[i] = m[n + i] = v[i] = 0.0f;
    core::StoreFromFloat(c.dtype, g.data(), i, 0.0f);
  }
  const core::Blockwise8Range range{n, kBs, 0, blocks};
  core::QuantizeBlockwise8(DType::kFloat32, m.data(), cb1, range, q1.data(), am1.data());
  core::QuantizeBlockwise8(DType::kFloat32, m.data() + n, cb1, range, q1.data() + n, am1.data() + blocks);
  core::QuantizeBlockwise8(DType::kFloat32, v.data(), cb2, range, q2.data(), am2.data());
  // A third block with a non-finite absmax (as a diverged state leaves it): dequantizing follows the host's NaN
  // rules (bw8::mul_like_host), where other blocks take a plain product.
  if (blocks > 2) {
    am1[2] = std::numeric_limits<float>::infinity();
    am2[2] = std::numeric_limits<float>::quiet_NaN();
  }
  // The codes of m2 follow m's n bytes: at n's alignment, as the ops lay ademamix's state out.
  const core::OptimStep step = core::MakeOptimStep(c.rule, true, 0.9, 0.999, 0.9999, 5.0, 1e-8, 0.01, 3, 1e-3,
                                                   0.75, c.skip_zeros);

  // The CPU's update on copies.
  std::vector<unsigned char> p_cpu(p.data(), p.data() + n * size), q1_cpu(q1.data(), q1.data() + 2 * n),
      q2_cpu(q2.data(), q2.data() + n);
  std::vector<float> am1_cpu = am1, am2_cpu = am2;
  core::OptimizerUpdate8(step, c.dtype, g.data(), p_cpu.data(), q1_cpu.data(), mix ? q1_cpu.data() + n : nullptr,
                         two ? q2_cpu.data() : nullptr, cb1, two ? &cb2 : nullptr, am1_cpu.data(),
                         mix ? am1_cpu.data() + blocks : nullptr, two ? am2_cpu.data() : nullptr, n, 0, blocks);

  // The kernel, emulated.
  alignas(16) static bw8::Prepared prep1, prep2;
  prep1 = Prepare(signed_map);
  prep2 = Prepare(unsigned_map);
  const Args args{g.data(), p.data(), q1.data(), mix ? q1.data() + n : nullptr, two ? q2.data() : nullptr, &prep1,
                  two ? &prep2 : nullptr, signed_map.data(), two ? unsigned_map.data() : nullptr, am1.data(),
                  mix ? am1.data() + blocks : nullptr, two ? am2.data() : nullptr,
                  jit::OptimKernelScalars(step, 0.0f), n, c.ctas};
  switch (c.dtype) {
    case DType::kFloat32: ByRule<float>(c.rule, c.per, args); break;
    case DType::kFloat16: ByRule<half>(c.rule, c.per, args); break;
    case DType::kBFloat16: ByRule<bf16>(c.rule, c.per, args); break;
  }

  EXPECT_EQ(emu::FirstDiff(p.data(), p_cpu.data(), n * size), -1) << "p (byte)";
  EXPECT_EQ(emu::FirstDiff(q1.data(), q1_cpu.data(), mix ? 2 * n : n), -1) << "state1 codes";
  EXPECT_EQ(std::memcmp(am1.data(), am1_cpu.data(), (mix ? 2 : 1) * blocks * 4), 0) << "state1 absmax";
  if (two) {
    EXPECT_EQ(emu::FirstDiff(q2.data(), q2_cpu.data(), n), -1) << "state2 codes";
    EXPECT_EQ(std::memcmp(am2.data(), am2_cpu.data(), blocks * 4), 0) << "state2 absmax";
  }
}

TEST(Optim8Emulated, EveryElementsPerThreadEqualsTheCpu) {
  for (int per : {1, 2, 4, 8}) {
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (OptimRule rule : {OptimRule::kAdam, OptimRule::kAdEMAMix, OptimRule::kLion}) {
        Check({rule, t, per, 1000, 0, false, 2});  // a partial last block
        Check({rule, t, per, 2048, 0, true, 1});   // whole blocks, skip_zeros, one CTA striding
      }
    }
  }
}

TEST(Optim8Emulated, MisalignedBuffersTakeTheElementPath) {
  for (int per : {4, 8}) {
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      for (int64_t misalign : {1, 4, 8}) {
        Check({OptimRule::kAdam, t, per, 777, misalign, false, 3});
        Check({OptimRule::kMomentum, t, per, 512, misalign, true, 1});
        for (const char* which : {"g", "p", "q"}) Check({OptimRule::kAdam, t, per, 512, misalign, false, 1, which});
      }
    }
  }
}

TEST(Optim8Emulated, TinyAndOddLengths) {
  for (int per : {1, 8}) {
    for (int64_t n : {1, 7, 255, 257}) Check({OptimRule::kAdam, DType::kFloat16, per, n, 0, false, 1});
  }
  // AdEMAMix's second momentum starts n codes after the first: an odd n misaligns it alone.
  for (int per : {4, 8}) Check({OptimRule::kAdEMAMix, DType::kFloat32, per, 1001, 0, false, 2});
}

// Which elements the WHOLE variant takes: whole state blocks of buffers aligned for 16-byte vectors.
TEST(Optim8Emulated, PlanUpdate8) {
  using core::DType;
  alignas(16) static uint8_t buf[64];
  const auto plan = [](DType t, int per, int64_t n, const void* g, const uint8_t* q) {
    const jit::Update8Plan p = jit::PlanUpdate8(t, per, n, g, buf, q, nullptr, q);
    return std::make_pair(p.whole, p.rest);
  };
  EXPECT_EQ(plan(DType::kFloat32, 8, 1000, buf, buf), std::make_pair(int64_t{768}, int64_t{232}));
  EXPECT_EQ(plan(DType::kFloat32, 8, 512, buf, buf), std::make_pair(int64_t{512}, int64_t{0}));
  EXPECT_EQ(plan(DType::kFloat32, 8, 255, buf, buf), std::make_pair(int64_t{0}, int64_t{255}));
  EXPECT_EQ(plan(DType::kFloat32, 4, 512, buf, buf + 4), std::make_pair(int64_t{512}, int64_t{0}));  // codes: 4 B
  EXPECT_EQ(plan(DType::kFloat32, 8, 512, buf, buf + 2), std::make_pair(int64_t{0}, int64_t{512}));
  EXPECT_EQ(plan(DType::kBFloat16, 8, 512, buf, buf + 4), std::make_pair(int64_t{0}, int64_t{512}));  // codes: 8 B
  EXPECT_EQ(plan(DType::kFloat32, 8, 512, buf + 4, buf), std::make_pair(int64_t{0}, int64_t{512}));
  EXPECT_EQ(plan(DType::kBFloat16, 4, 512, buf, buf), std::make_pair(int64_t{0}, int64_t{512}));  // half a vector
  EXPECT_EQ(plan(DType::kFloat32, 2, 512, buf, buf), std::make_pair(int64_t{0}, int64_t{512}));
}

// optimizer_update32 and optimizer_unorm32, emulated, against core::OptimizerUpdate32 (bit for bit) and
// core::OptimizerUnorm32 (the same float64 sum in another order), with and without a trust ratio.
template <class T, int kRule>
void Check32(OptimRule rule, bool clipped) {
  constexpr DType dtype = emu::DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat("32-bit rule ", kRule, " ", core::DTypeName(dtype), clipped ? " clipped" : ""));
  const bool two = rule == OptimRule::kAdam || rule == OptimRule::kAdEMAMix, mix = rule == OptimRule::kAdEMAMix;
  const int64_t n = 1000, size = core::DTypeSize(dtype);
  std::mt19937 rng(static_cast<unsigned>(kRule * 3 + clipped));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> g(n * size), p(n * size);
  std::vector<float> s1(2 * n), s2(n);
  for (int64_t i = 0; i < n; ++i) {
    core::StoreFromFloat(dtype, p.data(), i, normal(rng));
    core::StoreFromFloat(dtype, g.data(), i, i % 7 == 3 ? 0.0f : 0.5f * normal(rng));
  }
  for (float& x : s1) x = rule == OptimRule::kRMSprop || rule == OptimRule::kAdagrad ? 0.01f * std::fabs(normal(rng))
                                                                                      : 0.1f * normal(rng);
  for (float& x : s2) x = 0.01f * std::fabs(normal(rng));
  core::OptimStep step = core::MakeOptimStep(rule, false, 0.9, 0.999, 0.9999, 5.0, 1e-8, 0.01, 3, 1e-3, 0.75, true);

  // The trust ratio's sum of squares: the kernel's float64 atomics against the CPU's sum.
  double sum = 0.0;
  emu::Launch(2u, 256, optimizer_unorm32<T, kRule, 256>, reinterpret_cast<const T*>(g.data()),
              reinterpret_cast<const T*>(p.data()), static_cast<const float*>(s1.data()),
              static_cast<const float*>(two ? s2.data() : nullptr), jit::OptimKernelScalars(step, 0.0f),
              static_cast<long long>(n), &sum);
  const double sum_cpu = core::OptimizerUnorm32(step, dtype, g.data(), p.data(), s1.data(),
                                                two ? s2.data() : nullptr, 0, n);
  EXPECT_NEAR(sum, sum_cpu, 1e-12 * sum_cpu) << "unorm";

  const float unorm = static_cast<float>(sum_cpu);
  const float limit = clipped ? 0.5f * std::sqrt(unorm) : 0.0f;  // the update clipped to half its norm
  step.clip = clipped ? core::OptimClip(unorm, 0.5 * std::sqrt(unorm), 1.0, 0.0, false) : 1.0f;
  std::vector<unsigned char> p_cpu = p;
  std::vector<float> s1_cpu = s1, s2_cpu = s2;
  core::OptimizerUpdate32(step, dtype, g.data(), p_cpu.data(), s1_cpu.data(), mix ? s1_cpu.data() + n : nullptr,
                          two ? s2_cpu.data() : nullptr, 0, n);
  emu::Launch(3u, 128, optimizer_update32<T, kRule, 128>, reinterpret_cast<const T*>(g.data()),
              reinterpret_cast<T*>(p.data()), s1.data(), mix ? s1.data() + n : nullptr, two ? s2.data() : nullptr,
              clipped ? &unorm : nullptr, jit::OptimKernelScalars(step, limit), static_cast<long long>(n));
  EXPECT_EQ(p, p_cpu) << "p";
  EXPECT_EQ(std::memcmp(s1.data(), s1_cpu.data(), s1.size() * 4), 0) << "state1";
  EXPECT_EQ(std::memcmp(s2.data(), s2_cpu.data(), s2.size() * 4), 0) << "state2";
}

template <class T>
void Rules32() {
  for (bool clipped : {false, true}) {
    Check32<T, opt::kAdam>(OptimRule::kAdam, clipped);
    Check32<T, opt::kMomentum>(OptimRule::kMomentum, clipped);
    Check32<T, opt::kLion>(OptimRule::kLion, clipped);
    Check32<T, opt::kRMSprop>(OptimRule::kRMSprop, clipped);
    Check32<T, opt::kAdagrad>(OptimRule::kAdagrad, clipped);
  }
  Check32<T, opt::kAdEMAMix>(OptimRule::kAdEMAMix, false);
}

TEST(Optim32Emulated, UpdatesAndTrustRatioEqualTheCpu) {
  Rules32<float>();
  Rules32<half>();
  Rules32<bf16>();
}

}  // namespace
}  // namespace bnb
