// Vectorized optimizer updates (optim.h), compiled once per instruction set by Highway and picked at run time: the
// scalar definition's operations (optim_scalar.cc), in its order, a vector of elements at a time; the last elements
// of a range go through the same vector code in a padded buffer, so every element takes one path.
#include <algorithm>
#include <cstring>

#include "bnb/core/optim.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/optim_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// torch.sign: (0 < x) - (x < 0); NaN and -0 give +0.
HWY_INLINE VF Sign(VF x) {
  const DF df;
  const VF zero = hn::Zero(df), one = hn::Set(df, 1.0f);
  return hn::Sub(hn::IfThenElseZero(hn::Lt(zero, x), one), hn::IfThenElseZero(hn::Lt(x, zero), one));
}

// x / c, c one of the step's bias corrections and inverse its OptimStep inverse: on AVX-512 without a division
// where that is set (Intel's divider also takes the update's square root: the 8-bit update ~13% faster,
// tools/bench/NOTES.md, 'The 8-bit optimizer step: the bias correction by products').
HWY_INLINE VF DivideByCorrection(VF x, float c, float inverse) {
  const DF df;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (inverse != 0.0f) return QuotientByProducts<true>(x, hn::Set(df, c), hn::Set(df, inverse));
#endif
  return hn::Div(x, hn::Set(df, c));
}

// One vector of elements at i of g, p (kT) and the float32 states, updated by rule kRule.
template <DType kT, OptimRule kRule>
HWY_INLINE void Step(const OptimStep& st, const void* g_in, void* p_out, float* s1, float* s1b, float* s2,
                     int64_t i) {
  const DF df;
  const auto c = [df](float v) { return hn::Set(df, v); };
  const VF raw = LoadF32<kT>(g_in, i);
  const VF p0 = LoadF32<kT>(p_out, i);
  VF g = hn::Mul(raw, c(st.gnorm_scale));
  VF p = p0;
  if (st.decoupled_decay) p = hn::Mul(p, c(st.decay));
  if (st.coupled_decay) g = hn::Add(g, hn::Mul(p, c(st.weight_decay)));
  const auto keep = hn::Eq(raw, hn::Zero(df));  // used only with skip_zeros
  const auto store_state = [&](float* s, VF old, VF updated) {
    hn::StoreU(st.skip_zeros ? hn::IfThenElse(keep, old, updated) : updated, df, s + i);
  };
  if constexpr (kRule == OptimRule::kAdam) {
    const VF old1 = hn::LoadU(df, s1 + i), old2 = hn::LoadU(df, s2 + i);
    const VF m = hn::Add(hn::Mul(old1, c(st.b1)), hn::Mul(g, c(st.one_minus_b1)));
    const VF v = hn::Add(hn::Mul(old2, c(st.b2)), hn::Mul(hn::Mul(g, g), c(st.one_minus_b2)));
    if (st.eight_bit) {
      const VF denom = hn::Add(DivideByCorrection(hn::Sqrt(v), st.c2, st.c2_inverse), c(st.eps));
      p = hn::Add(p, hn::Mul(c(st.adam_neg_lr_c1), hn::Div(m, denom)));
    } else {
      const VF denom = hn::Add(hn::Sqrt(v), c(st.adam_eps_c2));
      p = hn::Add(p, hn::Mul(c(st.adam_step_size * st.clip), hn::Div(m, denom)));
    }
    store_state(s1, old1, m);
    store_state(s2, old2, v);
  } else if constexpr (kRule == OptimRule::kAdEMAMix) {
    const VF old1 = hn::LoadU(df, s1 + i), old1b = hn::LoadU(df, s1b + i), old2 = hn::LoadU(df, s2 + i);
    const VF m1 = hn::Add(hn::Mul(old1, c(st.b1)), hn::Mul(g, c(st.one_minus_b1)));
    const VF m2 = hn::Add(hn::Mul(old1b, c(st.b3)), hn::Mul(g, c(st.one_minus_b3)));
    const VF v = hn::Add(hn::Mul(old2, c(st.b2)), hn::Mul(hn::Mul(g, g), c(st.one_minus_b2)));
    const VF mixed = hn::Add(DivideByCorrection(m1, st.c1, st.c1_inverse), hn::Mul(c(st.alpha), m2));
    const VF denom = hn::Add(DivideByCorrection(hn::Sqrt(v), st.c2, st.c2_inverse), c(st.eps));
    p = hn::Sub(p, hn::Mul(c(st.lr), hn::Div(mixed, denom)));
    store_state(s1, old1, m1);
    store_state(s1b, old1b, m2);
    store_state(s2, old2, v);
  } else if constexpr (kRule == OptimRule::kMomentum) {
    const VF old1 = hn::LoadU(df, s1 + i);
    const VF m = st.first_step ? g : hn::Add(hn::Mul(old1, c(st.b1)), g);
    p = hn::Add(p, hn::Mul(hn::Mul(c(st.neg_lr), m), c(st.clip)));
    store_state(s1, old1, m);
  } else if constexpr (kRule == OptimRule::kLion) {
    const VF old1 = hn::LoadU(df, s1 + i);
    const VF direction = Sign(hn::Add(hn::Mul(old1, c(st.b1)), hn::Mul(g, c(st.one_minus_b1))));
    p = hn::Sub(p, hn::Mul(c(st.lr * st.clip), direction));
    store_state(s1, old1, hn::Add(hn::Mul(old1, c(st.b2)), hn::Mul(g, c(st.one_minus_b2))));
  } else if constexpr (kRule == OptimRule::kRMSprop) {
    const VF old1 = hn::LoadU(df, s1 + i);
    const VF v = hn::Add(hn::Mul(old1, c(st.b1)), hn::Mul(hn::Mul(g, g), c(st.one_minus_b1)));
    p = hn::Sub(p, hn::Mul(c(st.lr * st.clip), hn::Div(g, hn::Add(hn::Sqrt(v), c(st.eps)))));
    store_state(s1, old1, v);
  } else {  // adagrad
    const VF old1 = hn::LoadU(df, s1 + i);
    const VF v = hn::Add(old1, hn::Mul(g, g));
    p = hn::Sub(p, hn::Mul(c(st.lr), hn::Div(g, hn::Add(hn::Sqrt(v), c(st.eps)))));
    store_state(s1, old1, v);
  }
  StoreF32<kT>(st.skip_zeros ? hn::IfThenElse(keep, p0, p) : p, p_out, i);
}

template <DType kT, OptimRule kRule>
void Update32T(const OptimStep& st, const void* g, void* p, float* s1, float* s1b, float* s2, int64_t i0,
               int64_t i1) {
  constexpr int64_t N = static_cast<int64_t>(kN);
  int64_t i = i0;
  // Every stream prefetched kStreamAheadBytes of float32 state ahead (hwy_common-inl.h): the 32-bit step from
  // memory went 1.43 -> 1.22 ns a parameter on one thread of Emerald Rapids, 0.95-0.99x -> 0.88-0.89x torch's fused
  // AdamW at two (tools/bench/NOTES.md, 'Optimizer step: prefetch'). The 8-bit step's chunk buffers are in L1 anyway.
  constexpr int64_t kAhead = kStreamAheadBytes / 4;
  for (; i + N <= i1; i += N) {
    hwy::Prefetch(static_cast<const char*>(g) + (i + kAhead) * DTypeSize(kT));
    hwy::Prefetch(static_cast<const char*>(p) + (i + kAhead) * DTypeSize(kT));
    hwy::Prefetch(s1 + i + kAhead);
    if (s1b != nullptr) hwy::Prefetch(s1b + i + kAhead);
    if (s2 != nullptr) hwy::Prefetch(s2 + i + kAhead);
    Step<kT, kRule>(st, g, p, s1, s1b, s2, i);
  }
  const int64_t rest = i1 - i;
  if (rest == 0) return;
  // The last elements through the same vector code, in buffers padded with zeros.
  constexpr size_t kSize = DTypeSize(kT);
  HWY_ALIGN uint8_t gb[kN * 4] = {}, pb[kN * 4] = {};
  HWY_ALIGN float b1[kN] = {}, b1b[kN] = {}, b2[kN] = {};
  std::memcpy(gb, static_cast<const char*>(g) + i * kSize, rest * kSize);
  std::memcpy(pb, static_cast<const char*>(p) + i * kSize, rest * kSize);
  std::copy(s1 + i, s1 + i1, b1);
  if (s1b != nullptr) std::copy(s1b + i, s1b + i1, b1b);
  if (s2 != nullptr) std::copy(s2 + i, s2 + i1, b2);
  Step<kT, kRule>(st, gb, pb, b1, s1b != nullptr ? b1b : nullptr, s2 != nullptr ? b2 : nullptr, 0);
  std::memcpy(static_cast<char*>(p) + i * kSize, pb, rest * kSize);
  std::copy(b1, b1 + rest, s1 + i);
  if (s1b != nullptr) std::copy(b1b, b1b + rest, s1b + i);
  if (s2 != nullptr) std::copy(b2, b2 + rest, s2 + i);
}

template <DType kT>
void Update32ByRule(const OptimStep& st, const void* g, void* p, float* s1, float* s1b, float* s2, int64_t i0,
                    int64_t i1) {
  switch (st.rule) {
    case OptimRule::kAdam: return Update32T<kT, OptimRule::kAdam>(st, g, p, s1, s1b, s2, i0, i1);
    case OptimRule::kAdEMAMix: return Update32T<kT, OptimRule::kAdEMAMix>(st, g, p, s1, s1b, s2, i0, i1);
    case OptimRule::kMomentum: return Update32T<kT, OptimRule::kMomentum>(st, g, p, s1, s1b, s2, i0, i1);
    case OptimRule::kLion: return Update32T<kT, OptimRule::kLion>(st, g, p, s1, s1b, s2, i0, i1);
    case OptimRule::kRMSprop: return Update32T<kT, OptimRule::kRMSprop>(st, g, p, s1, s1b, s2, i0, i1);
    case OptimRule::kAdagrad: return Update32T<kT, OptimRule::kAdagrad>(st, g, p, s1, s1b, s2, i0, i1);
  }
}

void Update32(const OptimStep& st, DType dtype, const void* g, void* p, float* s1, float* s1b, float* s2, int64_t i0,
              int64_t i1) {
  switch (dtype) {
    case DType::kFloat32: return Update32ByRule<DType::kFloat32>(st, g, p, s1, s1b, s2, i0, i1);
    case DType::kFloat16: return Update32ByRule<DType::kFloat16>(st, g, p, s1, s1b, s2, i0, i1);
    case DType::kBFloat16: return Update32ByRule<DType::kBFloat16>(st, g, p, s1, s1b, s2, i0, i1);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(Update32);

void OptimizerUpdate32(const OptimStep& step, DType dtype, const void* g, void* p, float* s1, float* s1b, float* s2,
                       int64_t i0, int64_t i1) {
  HWY_DYNAMIC_DISPATCH(Update32)(step, dtype, g, p, s1, s1b, s2, i0, i1);
}

// A pass for lamb and lars only (with max_unorm), reading what the update reads: the scalar definition serves.
double OptimizerUnorm32(const OptimStep& step, DType dtype, const void* g, const void* p, const float* s1,
                        const float* s2, int64_t i0, int64_t i1) {
  return optim_scalar::Unorm32(step, dtype, g, p, s1, s2, i0, i1);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
