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

// One element's rule: g (raw, as stored), p and the states (m2 for ademamix, v for two-state rules) updated in
// place, whatever the gradient (update below applies skip_zeros).
template <int RULE, bool EIGHT_BIT>
__device__ __forceinline__ void apply_rule(const Scalars& st, float clip, float raw, float& p, float& s1, float& s1b,
                                           float& s2) {
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
}

// One element: apply_rule, except that a zero gradient under skip_zeros changes nothing (and returns false). The
// rule runs either way and the results are chosen after, so that the unrolled loops of the kernels stay free of a
// branch per element.
template <int RULE, bool EIGHT_BIT>
__device__ __forceinline__ bool update(const Scalars& st, float clip, float raw, float& p, float& s1, float& s1b,
                                       float& s2) {
  float pn = p, an = s1, bn = s1b, vn = s2;
  apply_rule<RULE, EIGHT_BIT>(st, clip, raw, pn, an, bn, vn);
  const bool skip = st.skip_zeros && raw == 0.0f;
  p = skip ? p : pn;
  s1 = skip ? s1 : an;
  s1b = skip ? s1b : bn;
  s2 = skip ? s2 : vn;
  return !skip;
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

// optimizer_update8's CTAs an SM, as launch bounds (ptxas fits the registers to them): four (64 registers) for the
// WHOLE variant of one- and two-state rules, whose hot path fits without spilling; three for AdEMAMix's three
// states (four spilled 56-64 bytes a thread); none (0) for the general variant, where a bound of three let ptxas
// take 80 registers at 1 and 2 elements a thread (58 without) and run 10-13% slower.
BNB_CONSTEXPR_HD int min_ctas(int rule, bool whole) { return !whole ? 0 : rule != kAdEMAMix ? 4 : 3; }

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

// Where a thread's PER elements of a state block lie: in chunks of V side by side (T's 16-byte vector, or all PER
// where fewer), chunk c of thread gl at c * G * V + gl * V within the block, so that each load or store instruction
// of a warp covers consecutive bytes (a thread's vectors side by side would spread a warp's 32 lanes over twice the
// sectors; tools/bench/NOTES.md, 'H100 check'). `start`: the thread's first element, block * 256 + gl * V.
template <class T, int PER>
struct Share {
  static constexpr int V = PER < Elem<T>::VEC ? PER : Elem<T>::VEC;
  static constexpr int G = 256 / PER;
  // Element k's place after start (increasing in k).
  static BNB_CONSTEXPR_HD long long at(int k) { return (long long)(k / V) * (G * V) + k % V; }
  // The elements before n (bit k: element k). Computed where needed, on the rare paths: a mask kept alive across
  // the update cost the common path registers.
  static __device__ __forceinline__ unsigned inside(long long start, long long n) {
    unsigned m = 0;
#pragma unroll
    for (int k = 0; k < PER; ++k) m |= (unsigned)(start + at(k) < n) << k;
    return m;
  }
};

// The largest |x| of a thread's share as float bits, for group_absmax (elements a thread does not hold are 0).
template <int PER>
__device__ __forceinline__ unsigned int max_bits(const float (&x)[PER]) {
  unsigned int mb = 0;
#pragma unroll
  for (int k = 0; k < PER; ++k) mb = max(mb, __float_as_uint(x[k]) & 0x7FFFFFFFu);
  return mb;
}

// optimizer_update8's requantize of one state's share, its elements before n, in a block of absmax `amax`: the
// block's absmax (by its first thread) and the codes. FULL: all PER elements before n, their codes stored by
// chunks (aligned, none past n), no guard per element. Every code goes through the table, then the exact
// route takes those it marks (as quantize_blockwise8 does), so that the unrolled loop has no branch: a block whose
// absmax is unfit for the table (0, inf, NaN, extreme) looks zeros up against 1 and is marked whole.
template <class T, int PER, bool FULL>
__device__ __forceinline__ void encode8(const float (&x)[PER], float amax, long long n, const bw8::Prepared& prep,
                                        unsigned char* codes, float* absmax, long long block, long long start) {
  using S = Share<T, PER>;
  const unsigned valid = FULL ? (1u << PER) - 1u : S::inside(start, n);
  // A codebook with a non-finite entry gives NaN absmax, as blockwise8's quantize does (bw8::Prepared).
  if (threadIdx.x % S::G == 0) absmax[block] = bw8::poisoned(prep) ? __uint_as_float(0x7FC00000u) : amax;
  const bool fast = FastScaleOk(amax);
  const float a = fast ? amax : 1.0f;
  const float y = fast ? __frcp_rn(amax) : 1.0f;
  unsigned char c[PER];
  unsigned redo = fast ? 0u : valid;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    bool r;
    c[k] = (unsigned char)bw8::code_fast(fast ? x[k] : 0.0f, a, y, prep, &r);
    if (FULL || ((valid >> k) & 1u)) redo |= (unsigned)r << k;  // (FULL ||: folded away; a mask cost registers)
  }
  if (redo != 0) {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      if ((redo >> k) & 1u) c[k] = bw8::code_exact(x[k], amax, prep.mid, prep.s2c);
    }
  }
  if constexpr (FULL && S::V >= 4) {
#pragma unroll
    for (int k = 0; k < PER; k += S::V) bw8::store_codes<S::V>(codes + start + S::at(k), c + k);
  } else {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      if ((valid >> k) & 1u) codes[start + S::at(k)] = c[k];
    }
  }
}

__device__ __forceinline__ bool finite(float x) { return (__float_as_uint(x) & 0x7FFFFFFFu) < 0x7F800000u; }

// optimizer_update8's work on one thread's share of a state block (from `start`, laid out as Share says, its
// elements before n): p, g and the codes loaded, the states dequantized (block absmax m1, m1b, m2; codebook
// values s_val) and updated into a, b, v, p stored. FULL: all PER elements, by 16-byte vectors, no guard per
// element; PLAIN: dequantize by a plain product (finite absmax and codebooks, where bw8::mul_like_host's NaN rules
// cannot arise).
template <class T, int RULE, int PER, bool FULL, bool PLAIN>
__device__ __forceinline__ void update8_share(const T* __restrict__ g, T* __restrict__ p,
                                              const unsigned char* __restrict__ q1,
                                              const unsigned char* __restrict__ q1b,
                                              const unsigned char* __restrict__ q2, const float (*s_val)[256],
                                              float m1, float m1b, float m2, const Scalars& st, long long start,
                                              long long n, float (&a)[PER], float (&b)[PER], float (&v)[PER]) {
  using S = Share<T, PER>;
  constexpr int VEC = Elem<T>::VEC;
  constexpr int NV = PER / VEC > 0 ? PER / VEC : 1;
  constexpr bool kTwo = two_states(RULE);
  constexpr bool kMix = RULE == kAdEMAMix;
  const unsigned valid = FULL ? (1u << PER) - 1u : S::inside(start, n);
  float pv[PER], gv[PER];
  unsigned char c1[PER], c1b[PER], c2[PER];
  if constexpr (FULL) {
    // (FULL: PER is a multiple of VEC, so S::V = VEC and vector k is chunk k.)
    Vec16 rp[NV], rg[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      rp[k] = *reinterpret_cast<const Vec16*>(p + start + S::at(k * VEC));
      rg[k] = *reinterpret_cast<const Vec16*>(g + start + S::at(k * VEC));
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      Elem<T>::unpack(rp[k], pv + k * VEC);
      Elem<T>::unpack(rg[k], gv + k * VEC);
    }
#pragma unroll
    for (int k = 0; k < PER; k += S::V) {
      bw8::load_codes<S::V>(q1 + start + S::at(k), c1 + k);
      if constexpr (kMix) bw8::load_codes<S::V>(q1b + start + S::at(k), c1b + k);
      if constexpr (kTwo) bw8::load_codes<S::V>(q2 + start + S::at(k), c2 + k);
    }
  } else {
    // Misaligned buffers and the partial last block: element by element.
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      if (!((valid >> k) & 1u)) continue;
      const long long i = start + S::at(k);
      pv[k] = Elem<T>::load(p + i);
      gv[k] = Elem<T>::load(g + i);
      c1[k] = q1[i];
      if constexpr (kMix) c1b[k] = q1b[i];
      if constexpr (kTwo) c2[k] = q2[i];
    }
  }
  unsigned int skipped = 0;  // elements a zero gradient leaves as they were (skip_zeros)
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    if (!((valid >> k) & 1u)) continue;
    a[k] = PLAIN ? __fmul_rn(s_val[0][c1[k]], m1) : bw8::mul_like_host(s_val[0][c1[k]], m1);
    if constexpr (kMix) b[k] = PLAIN ? __fmul_rn(s_val[0][c1b[k]], m1b) : bw8::mul_like_host(s_val[0][c1b[k]], m1b);
    if constexpr (kTwo) {
      v[k] = PLAIN ? __fmul_rn(s_val[kTwo ? 1 : 0][c2[k]], m2) : bw8::mul_like_host(s_val[kTwo ? 1 : 0][c2[k]], m2);
    }
    if (!update<RULE, true>(st, 1.0f, gv[k], pv[k], a[k], b[k], v[k])) skipped |= 1u << k;
  }
  if (FULL && skipped == 0) {
#pragma unroll
    for (int k = 0; k < NV; ++k) store16(p + start + S::at(k * VEC), Elem<T>::pack(pv + k * VEC));
  } else {
    // (A skipped element's p is left as it was, not stored back: a NaN's payload might not survive.)
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      if (((valid & ~skipped) >> k) & 1u) Elem<T>::store(p + start + S::at(k), pv[k]);
    }
  }
}

}  // namespace opt
}  // namespace bnb

// PER (1, 2, 4 or 8; the cuda.optim8_per_thread knob) elements of a state block per thread (laid out as opt::Share
// says): G = 256 / PER threads a block, THREADS / G blocks a tile. With PER a multiple of T's 16-byte vector (float:
// 4 and 8; half, bf16: 8) aligned, whole blocks move by 16-byte loads and stores; with PER = 8 a warp holds a block
// and its absmax meets by shuffles alone, no barrier.
//
// WHOLE: the host's promise that n is a multiple of 256 and every buffer aligned for those vectors (PER a multiple
// of T's vector), so that only the vector paths are compiled: the element path for partial and misaligned shares
// set the kernel's register count (float PER 8: 93 registers, 2 CTAs an SM; without it 64, 4 CTAs). The host runs
// whole blocks of aligned buffers by this variant and the rest, a partial last block, by the other
// (bnb/jit/optim.cc, PlanUpdate8).
template <class T, int RULE, int THREADS, int PER, bool WHOLE>
__global__ void __launch_bounds__(THREADS, bnb::opt::min_ctas(RULE, WHOLE))
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
  using S = opt::Share<T, PER>;
  constexpr bool kVec = PER % Elem<T>::VEC == 0;  // whole 16-byte vectors of p and g per thread
  static_assert(kVec || !WHOLE, "WHOLE: PER a multiple of T's 16-byte vector");
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
  const bool vec_ok = WHOLE || (kVec && bw8::aligned(g, 16) && bw8::aligned(p, 16) && bw8::aligned(q1, S::V) &&
                      (!kMix || bw8::aligned(q1b, S::V)) && (!kTwo || bw8::aligned(q2, S::V)));
  const long long nblocks = (n + kBlock - 1) / kBlock;
  const long long ntiles = (nblocks + QPT - 1) / QPT;
  // Codebooks without a non-finite entry (bw8::Prepared): with a finite absmax, dequantizing is a plain product.
  const bool clean = !bw8::poisoned(s_prep[0]) && (!kTwo || !bw8::poisoned(s_prep[kTwo ? 1 : 0]));
  for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const long long block = tile * QPT + group;
    const long long start = block * kBlock + (long long)gl * S::V;
    // Some of the share before n (its first element), all of it (its last: S::at increases).
    const bool some = block < nblocks && (WHOLE || start < n);
    const bool vec = WHOLE ? some : vec_ok && some && start + S::at(PER - 1) < n;
    float m1 = 0.0f, m1b = 0.0f, m2 = 0.0f;
    if (some) {
      m1 = am1[block];
      if constexpr (kMix) m1b = am1b[block];
      if constexpr (kTwo) m2 = am2[block];
    }
    // The new states; elements past `valid` stay 0, which no absmax notices.
    float a[PER], b[PER], v[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) a[k] = b[k] = v[k] = 0.0f;
    // The share's update: by vectors where it is whole and aligned, by a plain product where the absmax and
    // codebooks are finite (as nearly every block is).
    if (vec) {
      if constexpr (kVec) {
        if (clean && opt::finite(m1) && (!kMix || opt::finite(m1b)) && (!kTwo || opt::finite(m2))) {
          opt::update8_share<T, RULE, PER, true, true>(g, p, q1, q1b, q2, s_val, m1, m1b, m2, st, start, n, a,
                                                        b, v);
        } else {
          opt::update8_share<T, RULE, PER, true, false>(g, p, q1, q1b, q2, s_val, m1, m1b, m2, st, start, n, a,
                                                         b, v);
        }
      }
    } else if (some) {
      if constexpr (!WHOLE) {
        opt::update8_share<T, RULE, PER, false, false>(g, p, q1, q1b, q2, s_val, m1, m1b, m2, st, start, n, a, b,
                                                        v);
      }
    }
    // The blocks' new absmax, every thread of each group there (group_absmax), then the codes.
    const float amax1 = group_absmax<G>(opt::max_bits<PER>(a), s_red, group);
    const float amax1b = kMix ? group_absmax<G>(opt::max_bits<PER>(b), s_red, group) : 0.0f;
    const float amax2 = kTwo ? group_absmax<G>(opt::max_bits<PER>(v), s_red, group) : 0.0f;
    const bw8::Prepared& cb2 = s_prep[kTwo ? 1 : 0];
    if (vec) {
      opt::encode8<T, PER, true>(a, amax1, n, s_prep[0], q1, am1, block, start);
      if constexpr (kMix) opt::encode8<T, PER, true>(b, amax1b, n, s_prep[0], q1b, am1b, block, start);
      if constexpr (kTwo) opt::encode8<T, PER, true>(v, amax2, n, cb2, q2, am2, block, start);
    } else if (some) {
      if constexpr (!WHOLE) {
        opt::encode8<T, PER, false>(a, amax1, n, s_prep[0], q1, am1, block, start);
        if constexpr (kMix) opt::encode8<T, PER, false>(b, amax1b, n, s_prep[0], q1b, am1b, block, start);
        if constexpr (kTwo) opt::encode8<T, PER, false>(v, amax2, n, cb2, q2, am2, block, start);
      }
    }
  }
}
