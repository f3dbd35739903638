// The scalar definitions of the optimizer updates (optim.h), element by element, each operation rounded to float32.
#include <cmath>

#include "bnb/core/optim.h"

namespace bnb::core::optim_scalar {
namespace {

// torch.sign: (0 < x) - (x < 0), so NaN and -0 give +0.
float Sign(float x) { return static_cast<float>(0.0f < x) - static_cast<float>(x < 0.0f); }

}  // namespace

void Update32(const OptimStep& st, DType dtype, const void* g_in, void* p_out, float* s1, float* s1b, float* s2,
              int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const float raw = LoadAsFloat(dtype, g_in, i);
    const float p0 = LoadAsFloat(dtype, p_out, i);
    if (st.skip_zeros && raw == 0.0f) continue;
    float g = raw * st.gnorm_scale;
    float p = p0;
    if (st.decoupled_decay) p = p * st.decay;
    if (st.coupled_decay) g = g + p * st.weight_decay;
    switch (st.rule) {
      case OptimRule::kAdam: {
        const float m = s1[i] * st.b1 + g * st.one_minus_b1;
        const float v = s2[i] * st.b2 + (g * g) * st.one_minus_b2;
        if (st.eight_bit) {
          p = p + st.adam_neg_lr_c1 * (m / (std::sqrt(v) / st.c2 + st.eps));
        } else {
          p = p + (st.adam_step_size * st.clip) * (m / (std::sqrt(v) + st.adam_eps_c2));
        }
        s1[i] = m;
        s2[i] = v;
        break;
      }
      case OptimRule::kAdEMAMix: {
        const float m1 = s1[i] * st.b1 + g * st.one_minus_b1;
        const float m2 = s1b[i] * st.b3 + g * st.one_minus_b3;
        const float v = s2[i] * st.b2 + (g * g) * st.one_minus_b2;
        const float mixed = m1 / st.c1 + st.alpha * m2;
        p = p - st.lr * (mixed / (std::sqrt(v) / st.c2 + st.eps));
        s1[i] = m1;
        s1b[i] = m2;
        s2[i] = v;
        break;
      }
      case OptimRule::kMomentum: {
        const float m = st.first_step ? g : s1[i] * st.b1 + g;
        p = p + (st.neg_lr * m) * st.clip;
        s1[i] = m;
        break;
      }
      case OptimRule::kLion: {
        const float direction = Sign(s1[i] * st.b1 + g * st.one_minus_b1);
        p = p - (st.lr * st.clip) * direction;
        s1[i] = s1[i] * st.b2 + g * st.one_minus_b2;
        break;
      }
      case OptimRule::kRMSprop: {
        const float v = s1[i] * st.b1 + (g * g) * st.one_minus_b1;
        p = p - (st.lr * st.clip) * (g / (std::sqrt(v) + st.eps));
        s1[i] = v;
        break;
      }
      case OptimRule::kAdagrad: {
        const float v = s1[i] + g * g;
        p = p - st.lr * (g / (std::sqrt(v) + st.eps));
        s1[i] = v;
        break;
      }
    }
    StoreFromFloat(dtype, p_out, i, p);
  }
}

double Unorm32(const OptimStep& st, DType dtype, const void* g_in, const void* p_in, const float* s1, const float* s2,
               int64_t i0, int64_t i1) {
  double sum = 0.0;
  for (int64_t i = i0; i < i1; ++i) {
    float g = LoadAsFloat(dtype, g_in, i) * st.gnorm_scale;
    if (st.coupled_decay) g = g + LoadAsFloat(dtype, p_in, i) * st.weight_decay;
    float u = 0.0f;
    switch (st.rule) {
      case OptimRule::kAdam: {
        const float m = (s1[i] * st.b1 + g * st.one_minus_b1) * st.inv_c1;
        const float v = (s2[i] * st.b2 + (g * g) * st.one_minus_b2) * st.inv_c2_squared;
        u = m / (std::sqrt(v) + st.eps);
        break;
      }
      case OptimRule::kMomentum: u = st.first_step ? g : s1[i] * st.b1 + g; break;
      case OptimRule::kLion: u = s1[i] * st.b2 + g * st.one_minus_b2; break;
      case OptimRule::kRMSprop: u = g / (std::sqrt(s1[i] * st.b1 + (g * g) * st.one_minus_b1) + st.eps); break;
      case OptimRule::kAdagrad: u = g / (std::sqrt(s1[i] + g * g) + st.eps); break;
      case OptimRule::kAdEMAMix: break;
    }
    sum += static_cast<double>(u * u);
  }
  return sum;
}

}  // namespace bnb::core::optim_scalar
