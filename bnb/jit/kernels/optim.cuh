// Optimizer updates on CUDA, equal bit for bit to bnb/core's CPU ones (the rules: bnb/python/bnb/reference/optim.py,
// bnb/core/optim_scalar.cc). Every float operation is an explicit round-to-nearest intrinsic, so the compiler can
// neither fuse nor reorder it; square roots and quotients are the correctly rounded ones.
//
// Template arguments: T = float, bnb::half or bnb::bf16 (p and g); RULE = a bnb::opt::Rule; THREADS = threads per
// CTA (power of two in [32, 1024]; the 8-bit update's is one per element of a state block, 256).
//   optimizer_update32   elementwise, striding over n; the trust ratio from *unorm when unorm is not null
//   optimizer_unorm32    the trust ratio's sum of squared update directions, added in float64 to *sum
//   optimizer_update8    a CTA per block of 256 at a time: the states dequantized (8-bit codes, qmap, absmax),
//                        updated, and quantized back by blockwise8.cuh's rule through codebooks prepared by
//                        prepare_codebook8 into scratch (`prep1`, and `prep2` for two-state rules)
// Host side: bnb/jit/optim.h.
#pragma once

#include "blockwise8.cuh"
#include "optim_scalars.cuh"

namespace bnb {
namespace opt {

// bnb::core::OptimRule's values, in its order.
enum Rule { kAdam = 0, kAdEMAMix = 1, kMomentum = 2, kLion = 3, kRMSprop = 4, kAdagrad = 5 };

__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float root(float a) { return __fsqrt_rn(a); }

// torch.sign: (0 < x) - (x < 0); NaN and -0 give +0.
__device__ __forceinline__ float sign(float x) { return (0.0f < x ? 1.0f : 0.0f) - (x < 0.0f ? 1.0f : 0.0f); }

// bnb::core::OptimClip: limit / sqrt(unorm) where that root exceeds the limit, else 1.
__device__ __forceinline__ float clip_of(float unorm, float limit) {
  const float current = root(unorm);
  return current > limit ? div(limit, current) : 1.0f;
}

// One element: g (raw, as stored), p and the states (m2 for ademamix, v for two-state rules) updated in place.
// Returns false, changing nothing, for a zero gradient under skip_zeros.
template <int RULE, bool EIGHT_BIT>
__device__ __forceinline__ bool update(const Scalars& st, float clip, float raw, float& p, float& s1, float& s1b,
                                       float& s2) {
  if (st.skip_zeros && raw == 0.0f) return false;
  float g = mul(raw, st.gnorm_scale);
  if (st.decoupled_decay) p = mul(p, st.decay);
  if (st.coupled_decay) g = add(g, mul(p, st.weight_decay));
  if constexpr (RULE == kAdam) {
    const float m = add(mul(s1, st.b1), mul(g, st.one_minus_b1));
    const float v = add(mul(s2, st.b2), mul(mul(g, g), st.one_minus_b2));
    if constexpr (EIGHT_BIT) {
      p = add(p, mul(st.adam_neg_lr_c1, div(m, add(div(root(v), st.c2), st.eps))));
    } else {
      p = add(p, mul(mul(st.adam_step_size, clip), div(m, add(root(v), st.adam_eps_c2))));
    }
    s1 = m;
    s2 = v;
  } else if constexpr (RULE == kAdEMAMix) {
    const float m1 = add(mul(s1, st.b1), mul(g, st.one_minus_b1));
    const float m2 = add(mul(s1b, st.b3), mul(g, st.one_minus_b3));
    const float v = add(mul(s2, st.b2), mul(mul(g, g), st.one_minus_b2));
    const float mixed = add(div(m1, st.c1), mul(st.alpha, m2));
    p = sub(p, mul(st.lr, div(mixed, add(div(root(v), st.c2), st.eps))));
    s1 = m1;
    s1b = m2;
    s2 = v;
  } else if constexpr (RULE == kMomentum) {
    const float m = st.first_step ? g : add(mul(s1, st.b1), g);
    p = add(p, mul(mul(st.neg_lr, m), clip));
    s1 = m;
  } else if constexpr (RULE == kLion) {
    const float direction = sign(add(mul(s1, st.b1), mul(g, st.one_minus_b1)));
    p = sub(p, mul(mul(st.lr, clip), direction));
    s1 = add(mul(s1, st.b2), mul(g, st.one_minus_b2));
  } else if constexpr (RULE == kRMSprop) {
    const float v = add(mul(s1, st.b1), mul(mul(g, g), st.one_minus_b1));
    p = sub(p, mul(mul(st.lr, clip), div(g, add(root(v), st.eps))));
    s1 = v;
  } else {  // kAdagrad
    const float v = add(s1, mul(g, g));
    p = sub(p, mul(st.lr, div(g, add(root(v), st.eps))));
    s1 = v;
  }
  return true;
}

// The update direction the trust ratio clips, squared (bnb::core::optim_scalar::Unorm32).
template <int RULE>
__device__ __forceinline__ float unorm_term(const Scalars& st, float raw, float p, float s1, float s2) {
  float g = mul(raw, st.gnorm_scale);
  if (st.coupled_decay) g = add(g, mul(p, st.weight_decay));
  float u = 0.0f;
  if constexpr (RULE == kAdam) {
    const float m = mul(add(mul(s1, st.b1), mul(g, st.one_minus_b1)), st.inv_c1);
    const float v = mul(add(mul(s2, st.b2), mul(mul(g, g), st.one_minus_b2)), st.inv_c2_squared);
    u = div(m, add(root(v), st.eps));
  } else if constexpr (RULE == kMomentum) {
    u = st.first_step ? g : add(mul(s1, st.b1), g);
  } else if constexpr (RULE == kLion) {
    u = add(mul(s1, st.b2), mul(g, st.one_minus_b2));
  } else if constexpr (RULE == kRMSprop) {
    u = div(g, add(root(add(mul(s1, st.b1), mul(mul(g, g), st.one_minus_b1))), st.eps));
  } else if constexpr (RULE == kAdagrad) {
    u = div(g, add(root(add(s1, mul(g, g))), st.eps));
  }
  return mul(u, u);
}

BNB_CONSTEXPR_HD bool two_states(int rule) { return rule == kAdam || rule == kAdEMAMix; }

}  // namespace opt
}  // namespace bnb

template <class T, int RULE, int THREADS>
__global__ void __launch_bounds__(THREADS)
    optimizer_update32(const T* __restrict__ g, T* __restrict__ p, float* __restrict__ s1, float* __restrict__ s1b,
                       float* __restrict__ s2, const float* __restrict__ unorm, bnb::opt::Scalars st, long long n) {
  using namespace bnb;
  const float clip = unorm != nullptr ? opt::clip_of(*unorm, st.clip_limit) : 1.0f;
  for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
    float pv = Elem<T>::load(p + i);
    float a = s1[i], b = 0.0f, v = 0.0f;
    if constexpr (RULE == opt::kAdEMAMix) b = s1b[i];
    if constexpr (opt::two_states(RULE)) v = s2[i];
    if (!opt::update<RULE, false>(st, clip, Elem<T>::load(g + i), pv, a, b, v)) continue;
    Elem<T>::store(p + i, pv);
    s1[i] = a;
    if constexpr (RULE == opt::kAdEMAMix) s1b[i] = b;
    if constexpr (opt::two_states(RULE)) s2[i] = v;
  }
}

template <class T, int RULE, int THREADS>
__global__ void __launch_bounds__(THREADS)
    optimizer_unorm32(const T* __restrict__ g, const T* __restrict__ p, const float* __restrict__ s1,
                      const float* __restrict__ s2, bnb::opt::Scalars st, long long n, double* __restrict__ sum) {
  using namespace bnb;
  __shared__ double s_part[THREADS / 32];
  double acc = 0.0;
  for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
    const float v = opt::two_states(RULE) ? s2[i] : 0.0f;
    acc += (double)opt::unorm_term<RULE>(st, Elem<T>::load(g + i), Elem<T>::load(p + i), s1[i], v);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  if ((threadIdx.x & 31) == 0) s_part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) total += s_part[w];
    atomicAdd(sum, total);
  }
}

template <class T, int RULE, int THREADS>
__global__ void __launch_bounds__(THREADS)
    optimizer_update8(const T* __restrict__ g, T* __restrict__ p, unsigned char* __restrict__ q1,
                      unsigned char* __restrict__ q1b, unsigned char* __restrict__ q2,
                      const bnb::bw8::Prepared* __restrict__ prep1, const bnb::bw8::Prepared* __restrict__ prep2,
                      const float* __restrict__ qmap1, const float* __restrict__ qmap2, float* __restrict__ am1,
                      float* __restrict__ am1b, float* __restrict__ am2, bnb::opt::Scalars st, long long n) {
  using namespace bnb;
  static_assert(THREADS == 256, "one thread per element of a block of 256");
  constexpr bool kTwo = opt::two_states(RULE);
  // The prepared codebooks (the second only for two-state rules) and the codebooks' values.
  __shared__ bw8::Prepared s_prep[kTwo ? 2 : 1];
  __shared__ float s_val[kTwo ? 2 : 1][256];
  __shared__ unsigned int s_red[THREADS / 32];
  for (int i = threadIdx.x; i < (int)(sizeof(bw8::Prepared) / 16); i += THREADS) {
    reinterpret_cast<Vec16*>(&s_prep[0])[i] = reinterpret_cast<const Vec16*>(prep1)[i];
    if constexpr (kTwo) reinterpret_cast<Vec16*>(&s_prep[kTwo ? 1 : 0])[i] = reinterpret_cast<const Vec16*>(prep2)[i];
  }
  s_val[0][threadIdx.x] = qmap1[threadIdx.x];
  if constexpr (kTwo) s_val[kTwo ? 1 : 0][threadIdx.x] = qmap2[threadIdx.x];
  __syncthreads();

  // The absmax of a block's new state values and their codes (inactive threads count as 0).
  const auto requantize = [&](float x, bool active, const bw8::Prepared& prep, unsigned char* codes, float* absmax,
                              long long block, long long i) {
    const unsigned mb = active ? (__float_as_uint(x) & 0x7FFFFFFFu) : 0u;
    const float amax = group_absmax<THREADS>(mb, s_red, 0);
    // A codebook with a non-finite entry gives NaN absmax, as blockwise8's quantize does (bw8::Prepared).
    if (threadIdx.x == 0) absmax[block] = bw8::poisoned(prep) ? __uint_as_float(0x7FC00000u) : amax;
    const bool fast = FastScaleOk(amax);
    const float y = fast ? __frcp_rn(amax) : 0.0f;
    if (active) codes[i] = bw8::code_in_block(x, amax, fast, y, prep);
  };

  const long long nblocks = (n + THREADS - 1) / THREADS;
  for (long long block = blockIdx.x; block < nblocks; block += gridDim.x) {
    const long long i = block * THREADS + threadIdx.x;
    const bool active = i < n;
    float a = 0.0f, b = 0.0f, v = 0.0f;
    if (active) {
      float pv = Elem<T>::load(p + i);
      a = bw8::mul_like_host(s_val[0][q1[i]], am1[block]);
      if constexpr (RULE == opt::kAdEMAMix) b = bw8::mul_like_host(s_val[0][q1b[i]], am1b[block]);
      if constexpr (kTwo) v = bw8::mul_like_host(s_val[kTwo ? 1 : 0][q2[i]], am2[block]);
      if (opt::update<RULE, true>(st, 1.0f, Elem<T>::load(g + i), pv, a, b, v)) Elem<T>::store(p + i, pv);
    }
    // Every thread reaches each requantize (its absmax meets in shared memory).
    requantize(a, active, s_prep[0], q1, am1, block, i);
    if constexpr (RULE == opt::kAdEMAMix) requantize(b, active, s_prep[0], q1b, am1b, block, i);
    if constexpr (kTwo) requantize(v, active, s_prep[kTwo ? 1 : 0], q2, am2, block, i);
  }
}
