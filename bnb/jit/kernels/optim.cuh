// Optimizer updates on CUDA, equal bit for bit to bnb/core's CPU ones (the rules: bnb/python/bnb/reference/optim.py,
// bnb/core/optim_scalar.cc). Every float operation is an explicit round-to-nearest intrinsic, so the compiler can
// neither fuse nor reorder it; square roots and quotients are the correctly rounded ones.
//
// Template arguments: T = float, bnb::half or bnb::bf16 (p and g); RULE = a bnb::opt::Rule; THREADS = threads per
// CTA (power of two in [32, 1024]; the 8-bit update's is 256); PER (the 8-bit update's) = elements of a state block
// per thread, 1, 2, 4 or 8.
//   optimizer_update32   elementwise, striding over n; the trust ratio from *unorm when unorm is not null
//   optimizer_unorm32    the trust ratio's sum of squared update directions, added in float64 to *sum
//   optimizer_update8    blocks of 256 by 256 / PER threads each, 256 * PER elements a CTA at a time: the states
//                        dequantized (8-bit codes, qmap, absmax), updated, and quantized back by blockwise8.cuh's
//                        rule through codebooks prepared by prepare_codebook8 into scratch (`prep1`, and `prep2`
//                        for two-state rules)
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

namespace bnb {
namespace opt {

// optimizer_update8's requantize of one state: the absmax of a state block's new values (those past the thread's
// `valid` elements count as 0), then their codes; `vec`: PER codes by one store (aligned, none past n). Every thread
// of the group calls it (group_absmax), also with nothing valid.
template <int PER, int G>
__device__ __forceinline__ void requantize8(const float (&x)[PER], int valid, bool vec, const bw8::Prepared& prep,
                                            unsigned int* s_red, int group, unsigned char* codes, float* absmax,
                                            long long block, long long start) {
  unsigned int mb = 0;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    if (k < valid) mb = max(mb, __float_as_uint(x[k]) & 0x7FFFFFFFu);
  }
  const float amax = group_absmax<G>(mb, s_red, group);
  if (valid <= 0) return;
  // A codebook with a non-finite entry gives NaN absmax, as blockwise8's quantize does (bw8::Prepared).
  if (threadIdx.x % G == 0) absmax[block] = bw8::poisoned(prep) ? __uint_as_float(0x7FC00000u) : amax;
  const bool fast = FastScaleOk(amax);
  const float y = fast ? __frcp_rn(amax) : 0.0f;
  unsigned char c[PER];
#pragma unroll
  for (int k = 0; k < PER; ++k) c[k] = k < valid ? bw8::code_in_block(x[k], amax, fast, y, prep) : 0;
  if constexpr (PER >= 4) {
    if (vec) {
      bw8::store_codes<PER>(codes + start, c);
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    if (k < valid) codes[start + k] = c[k];
  }
}

}  // namespace opt
}  // namespace bnb

// PER (1, 2, 4 or 8; the cuda.optim8_per_thread knob) elements of a state block per thread: G = 256 / PER threads
// a block, THREADS / G blocks a tile. With PER a multiple of T's 16-byte vector (float: 4 and 8; half, bf16: 8)
// aligned, whole blocks move by 16-byte loads and stores; with PER = 8 a warp holds a block and its absmax meets by
// shuffles alone, no barrier.
template <class T, int RULE, int THREADS, int PER>
__global__ void __launch_bounds__(THREADS)
    optimizer_update8(const T* __restrict__ g, T* __restrict__ p, unsigned char* __restrict__ q1,
                      unsigned char* __restrict__ q1b, unsigned char* __restrict__ q2,
                      const bnb::bw8::Prepared* __restrict__ prep1, const bnb::bw8::Prepared* __restrict__ prep2,
                      const float* __restrict__ qmap1, const float* __restrict__ qmap2, float* __restrict__ am1,
                      float* __restrict__ am1b, float* __restrict__ am2, bnb::opt::Scalars st, long long n) {
  using namespace bnb;
  static_assert(THREADS == 256, "the 8-bit update runs 256 threads a CTA");
  static_assert(PER == 1 || PER == 2 || PER == 4 || PER == 8, "PER: 1, 2, 4 or 8 elements a thread");
  constexpr int kBlock = 256;       // elements per state block (core::kOptimizerBlocksize)
  constexpr int G = kBlock / PER;   // threads per state block
  constexpr int QPT = THREADS / G;  // state blocks per tile
  constexpr int VEC = Elem<T>::VEC;
  constexpr bool kVec = PER % VEC == 0;  // whole 16-byte vectors of p and g per thread
  constexpr int NV = kVec ? PER / VEC : 1;
  constexpr bool kTwo = opt::two_states(RULE);
  constexpr bool kMix = RULE == opt::kAdEMAMix;
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

  const int group = threadIdx.x / G;
  const int gl = threadIdx.x % G;
  // (ademamix's q1b starts n bytes after q1: aligned only where n is.)
  const bool vec_ok = kVec && bw8::aligned(g, 16) && bw8::aligned(p, 16) && bw8::aligned(q1, PER) &&
                      (!kMix || bw8::aligned(q1b, PER)) && (!kTwo || bw8::aligned(q2, PER));
  const long long nblocks = (n + kBlock - 1) / kBlock;
  const long long ntiles = (nblocks + QPT - 1) / QPT;
  for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const long long block = tile * QPT + group;
    const long long start = block * kBlock + (long long)gl * PER;
    const int valid = block < nblocks && start < n ? (int)(n - start < PER ? n - start : PER) : 0;
    const bool vec = vec_ok && valid == PER;
    float a[PER], b[PER], v[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) a[k] = b[k] = v[k] = 0.0f;
    if (valid > 0) {
      float pv[PER], gv[PER];
      unsigned char c1[PER], c1b[PER], c2[PER];
      if constexpr (kVec) {
        if (vec) {
          Vec16 rp[NV], rg[NV];
#pragma unroll
          for (int k = 0; k < NV; ++k) {
            rp[k] = reinterpret_cast<const Vec16*>(p + start)[k];
            rg[k] = reinterpret_cast<const Vec16*>(g + start)[k];
          }
#pragma unroll
          for (int k = 0; k < NV; ++k) {
            Elem<T>::unpack(rp[k], pv + k * VEC);
            Elem<T>::unpack(rg[k], gv + k * VEC);
          }
          bw8::load_codes<PER>(q1 + start, c1);
          if constexpr (kMix) bw8::load_codes<PER>(q1b + start, c1b);
          if constexpr (kTwo) bw8::load_codes<PER>(q2 + start, c2);
        }
      }
      if (!vec) {
        // Misaligned buffers and the partial last block: element by element.
#pragma unroll
        for (int k = 0; k < PER; ++k) {
          if (k >= valid) continue;
          pv[k] = Elem<T>::load(p + start + k);
          gv[k] = Elem<T>::load(g + start + k);
          c1[k] = q1[start + k];
          if constexpr (kMix) c1b[k] = q1b[start + k];
          if constexpr (kTwo) c2[k] = q2[start + k];
        }
      }
      const float m1 = am1[block];
      const float m1b = kMix ? am1b[block] : 0.0f;
      const float m2 = kTwo ? am2[block] : 0.0f;
      unsigned int skipped = 0;  // elements a zero gradient leaves as they were (skip_zeros)
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        if (k >= valid) continue;
        a[k] = bw8::mul_like_host(s_val[0][c1[k]], m1);
        if constexpr (kMix) b[k] = bw8::mul_like_host(s_val[0][c1b[k]], m1b);
        if constexpr (kTwo) v[k] = bw8::mul_like_host(s_val[kTwo ? 1 : 0][c2[k]], m2);
        if (!opt::update<RULE, true>(st, 1.0f, gv[k], pv[k], a[k], b[k], v[k])) skipped |= 1u << k;
      }
      bool stored = false;
      if constexpr (kVec) {
        if (vec && skipped == 0) {
#pragma unroll
          for (int k = 0; k < NV; ++k) store16(p + start + k * VEC, Elem<T>::pack(pv + k * VEC));
          stored = true;
        }
      }
      if (!stored) {
#pragma unroll
        for (int k = 0; k < PER; ++k) {
          if (k < valid && !((skipped >> k) & 1u)) Elem<T>::store(p + start + k, pv[k]);
        }
      }
    }
    // Every thread reaches each requantize (its absmax meets across the group).
    opt::requantize8<PER, G>(a, valid, vec, s_prep[0], s_red, group, q1, am1, block, start);
    if constexpr (kMix) opt::requantize8<PER, G>(b, valid, vec, s_prep[0], s_red, group, q1b, am1b, block, start);
    if constexpr (kTwo) {
      opt::requantize8<PER, G>(v, valid, vec, s_prep[kTwo ? 1 : 0], s_red, group, q2, am2, block, start);
    }
  }
}
