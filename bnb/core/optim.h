// Optimizer updates over raw buffers: bitsandbytes' 32-bit and 8-bit blockwise optimizers (adam, lamb, ademamix,
// momentum, lars, lion, rmsprop, adagrad), element by element as bnb/python/bnb/reference/optim.py defines them, bit
// for bit (the update-norm sum of lamb / lars aside, which any summation order may round differently in float64).
// Each function takes a range (elements, or blocks of 256 for 8-bit states), so callers may split work across threads.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bnb/core/codebook.h"
#include "bnb/core/dtype.h"

namespace bnb::core {

// The update rules; lamb is adam's and lars momentum's (their difference, the trust ratio, is OptimStep::clip).
enum class OptimRule { kAdam, kAdEMAMix, kMomentum, kLion, kRMSprop, kAdagrad };

struct OptimKind {
  OptimRule rule;
  bool two_states;  // adam, lamb, ademamix
  bool one_state_clip;  // the trust ratio's limit adds eps (one-state optimizers)
};

// "adam", "lamb", "ademamix", "momentum", "lars", "lion", "rmsprop", "adagrad"; an error listing them otherwise.
absl::StatusOr<OptimKind> ParseOptimizer(absl::string_view name);

inline constexpr int64_t kOptimizerBlocksize = 256;  // 8-bit states' blocks

// One step's scalars, each rounded to float32 once from the op's float64 arguments (the reference's f32()).
struct OptimStep {
  OptimRule rule;
  bool eight_bit;
  bool skip_zeros;      // elements with g == 0 keep p and their states
  bool first_step;      // step == 1 (momentum takes g as its state)
  bool decoupled_decay;  // p * decay before the update (adam, lamb, ademamix, lion with weight decay)
  bool coupled_decay;    // g + p * weight_decay (momentum, lars, rmsprop, adagrad with weight decay)
  float gnorm_scale, decay, weight_decay;
  float b1, b2, b3, one_minus_b1, one_minus_b2, one_minus_b3;
  float lr, neg_lr, eps, alpha;
  float adam_step_size, adam_eps_c2;  // 32-bit adam: -lr * c2 / c1 and eps * c2
  float adam_neg_lr_c1;               // 8-bit adam: -lr / c1
  float c1, c2;                       // 1 - beta1^step, sqrt(1 - beta2^step)
  // 1.0f / c1 and 1.0f / c2 (from the float32 c1, c2) on Intel, where c1, c2 lie within [kQuotientTiny,
  // kQuotientHuge] (quotient.h): the AVX-512 kernels divide by them as QuotientByProducts; else 0, and they divide.
  float c1_inverse, c2_inverse;
  float inv_c1, inv_c2_squared;       // the trust ratio's bias corrections: 1 / c1, 1 / (1 - beta2^step)
  float clip = 1.0f;                  // the trust ratio (32-bit lamb / lars), set by the caller
};

OptimStep MakeOptimStep(OptimRule rule, bool eight_bit, double beta1, double beta2, double beta3, double alpha,
                        double eps, double weight_decay, int64_t step, double lr, double gnorm_scale,
                        bool skip_zeros);

// The trust ratio's limit, f32(max_unorm * param_norm (+ eps for one-state optimizers)), and the ratio for unorm,
// the update direction's sum of squares: limit / sqrt(unorm) where that root exceeds the limit, else 1.
float OptimClip(float unorm, double max_unorm, double param_norm, double eps, bool one_state);

// 32-bit: elements [i0, i1) of p and g (dtype) and the float32 states: s1 (ademamix: m1), s1b (ademamix's m2, else
// null), s2 (two-state optimizers, else null).
void OptimizerUpdate32(const OptimStep& step, DType dtype, const void* g, void* p, float* s1, float* s1b, float* s2,
                       int64_t i0, int64_t i1);

// The sum, in float64, over elements [i0, i1) of the squared update direction the trust ratio clips (the
// reference's _unorm_sum). Not for ademamix.
double OptimizerUnorm32(const OptimStep& step, DType dtype, const void* g, const void* p, const float* s1,
                        const float* s2, int64_t i0, int64_t i1);

// 8-bit blockwise: blocks [b0, b1) (of 256; the last may be partial) of n elements: states dequantized from their
// codes (q1 / q1b / q2 with codebooks cb1 / cb2 and per-block absmax am1 / am1b / am2; q1b, am1b: ademamix's m2,
// else null; q2, cb2, am2: two-state optimizers, else null), updated with p, and quantized back in place.
void OptimizerUpdate8(const OptimStep& step, DType dtype, const void* g, void* p, uint8_t* q1, uint8_t* q1b,
                      uint8_t* q2, const PreparedCodebook& cb1, const PreparedCodebook* cb2, float* am1, float* am1b,
                      float* am2, int64_t n, int64_t b0, int64_t b1);

// The scalar definitions the vectorized versions are tested against.
namespace optim_scalar {
void Update32(const OptimStep& step, DType dtype, const void* g, void* p, float* s1, float* s1b, float* s2,
              int64_t i0, int64_t i1);
double Unorm32(const OptimStep& step, DType dtype, const void* g, const void* p, const float* s1, const float* s2,
               int64_t i0, int64_t i1);
}  // namespace optim_scalar

}  // namespace bnb::core
