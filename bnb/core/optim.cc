// The optimizers' names, one step's scalars, the trust ratio, and the 8-bit update as dequantize, update and
// quantize over chunks of blocks (the passes of blockwise8.h and OptimizerUpdate32).
#include "bnb/core/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/quotient.h"

namespace bnb::core {

absl::StatusOr<OptimKind> ParseOptimizer(absl::string_view name) {
  if (name == "adam" || name == "lamb") return OptimKind{OptimRule::kAdam, true, false};
  if (name == "ademamix") return OptimKind{OptimRule::kAdEMAMix, true, false};
  if (name == "momentum" || name == "lars") return OptimKind{OptimRule::kMomentum, false, true};
  if (name == "lion") return OptimKind{OptimRule::kLion, false, true};
  if (name == "rmsprop") return OptimKind{OptimRule::kRMSprop, false, true};
  if (name == "adagrad") return OptimKind{OptimRule::kAdagrad, false, true};
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", name, "'; expected one of: adam, lamb, ademamix, ",
                                                 "momentum, lars, rmsprop, adagrad, lion"));
}

OptimStep MakeOptimStep(OptimRule rule, bool eight_bit, double beta1, double beta2, double beta3, double alpha,
                        double eps, double weight_decay, int64_t step, double lr, double gnorm_scale,
                        bool skip_zeros) {
  const auto f = [](double x) { return static_cast<float>(x); };
  OptimStep s{};
  s.rule = rule;
  s.eight_bit = eight_bit;
  s.skip_zeros = skip_zeros;
  s.first_step = step == 1;
  const bool decoupled = rule == OptimRule::kAdam || rule == OptimRule::kAdEMAMix || rule == OptimRule::kLion;
  s.decoupled_decay = decoupled && weight_decay > 0.0;
  s.coupled_decay = !decoupled && weight_decay > 0.0;
  s.gnorm_scale = f(gnorm_scale);
  s.decay = f(1.0 - lr * weight_decay);
  s.weight_decay = f(weight_decay);
  s.b1 = f(beta1);
  s.b2 = f(beta2);
  s.b3 = f(beta3);
  s.one_minus_b1 = f(1.0 - beta1);
  s.one_minus_b2 = f(1.0 - beta2);
  s.one_minus_b3 = f(1.0 - beta3);
  s.lr = f(lr);
  s.neg_lr = f(-lr);
  s.eps = f(eps);
  s.alpha = f(alpha);
  const double c1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double c2_squared = 1.0 - std::pow(beta2, static_cast<double>(step));
  const double c2 = std::sqrt(c2_squared);
  s.adam_step_size = f(-lr * c2 / c1);
  s.adam_eps_c2 = f(eps * c2);
  s.adam_neg_lr_c1 = f(-lr / c1);
  s.c1 = f(c1);
  s.c2 = f(c2);
  // Measured on Intel only (its divider also takes the square root): elsewhere the kernels divide.
  static const bool intel = CpuIsIntel();
  const auto inverse = [](float c) { return intel && c >= kQuotientTiny && c <= kQuotientHuge ? 1.0f / c : 0.0f; };
  s.c1_inverse = inverse(s.c1);
  s.c2_inverse = inverse(s.c2);
  s.inv_c1 = f(1.0 / c1);
  s.inv_c2_squared = f(1.0 / c2_squared);
  return s;
}

float OptimClip(float unorm, double max_unorm, double param_norm, double eps, bool one_state) {
  const float limit = static_cast<float>(max_unorm * param_norm + (one_state ? eps : 0.0));
  const float current = std::sqrt(unorm);
  return current > limit ? limit / current : 1.0f;
}

namespace {

// Ranges of at least this many elements are taken to stream from memory (their g, p and states, ~16 bytes an
// element, pass a core's L2).
constexpr int64_t kStreamedElements = int64_t{1} << 17;

// Prefetches bytes [from, to) of base into L2, a line at a time.
void PrefetchBytes(const void* base, int64_t from, int64_t to) {
  for (int64_t b = from; b < to; b += 64) __builtin_prefetch(static_cast<const char*>(base) + b, 0, 2);
}

}  // namespace

void OptimizerUpdate8(const OptimStep& step, DType dtype, const void* g, void* p, uint8_t* q1, uint8_t* q1b,
                      uint8_t* q2, const PreparedCodebook& cb1, const PreparedCodebook* cb2, float* am1, float* am1b,
                      float* am2, int64_t n, int64_t b0, int64_t b1) {
  constexpr int64_t kBs = kOptimizerBlocksize, kChunkBlocks = 16, kChunk = kChunkBlocks * kBs;
  std::vector<float> m1(kChunk), m2(q1b != nullptr ? kChunk : 0), v(q2 != nullptr ? kChunk : 0);
  const int64_t size = DTypeSize(dtype);
  for (int64_t c0 = b0; c0 < b1; c0 += kChunkBlocks) {
    const int64_t c1 = std::min(c0 + kChunkBlocks, b1);
    const int64_t lo = c0 * kBs, len = std::min(c1 * kBs, n) - lo, blocks = c1 - c0;
    // The chunk as a buffer of its own: elements [0, len), blocks [0, blocks).
    const Blockwise8Range chunk{len, kBs, 0, blocks};
    DequantizeBlockwise8(DType::kFloat32, q1 + lo, am1 + c0, cb1, chunk, m1.data());
    if (q1b != nullptr) DequantizeBlockwise8(DType::kFloat32, q1b + lo, am1b + c0, cb1, chunk, m2.data());
    if (q2 != nullptr) DequantizeBlockwise8(DType::kFloat32, q2 + lo, am2 + c0, *cb2, chunk, v.data());
    OptimizerUpdate32(step, dtype, static_cast<const char*>(g) + lo * size, static_cast<char*>(p) + lo * size,
                      m1.data(), q1b != nullptr ? m2.data() : nullptr, q2 != nullptr ? v.data() : nullptr, 0, len);
    // The requantize is the step's compute-bound stage (the others wait on memory). Over a range larger than a
    // core's L2 it runs a block at a time, each followed by prefetches of its share of the next chunk's g, p and
    // codes, so that they arrive meanwhile; in cache the calls a block at a time would cost more than they hide.
    // Figures: tools/bench/NOTES.md, 'Optimizer step'.
    const int64_t next = c1 * kBs, next_len = std::max<int64_t>(0, std::min({next + kChunk, b1 * kBs, n}) - next);
    const int64_t parts = (b1 - b0) * kBs >= kStreamedElements ? blocks : 1;
    for (int64_t j = 0; j < parts; ++j) {
      const Blockwise8Range part{len, kBs, blocks * j / parts, blocks * (j + 1) / parts};
      QuantizeBlockwise8(DType::kFloat32, m1.data(), cb1, part, q1 + lo, am1 + c0);
      if (q1b != nullptr) QuantizeBlockwise8(DType::kFloat32, m2.data(), cb1, part, q1b + lo, am1b + c0);
      if (q2 != nullptr) QuantizeBlockwise8(DType::kFloat32, v.data(), *cb2, part, q2 + lo, am2 + c0);
      if (parts > 1) {
        const int64_t e0 = next + next_len * j / parts, e1 = next + next_len * (j + 1) / parts;
        PrefetchBytes(g, e0 * size, e1 * size);
        PrefetchBytes(p, e0 * size, e1 * size);
        PrefetchBytes(q1, e0, e1);
        if (q1b != nullptr) PrefetchBytes(q1b, e0, e1);
        if (q2 != nullptr) PrefetchBytes(q2, e0, e1);
      }
    }
  }
}

}  // namespace bnb::core
