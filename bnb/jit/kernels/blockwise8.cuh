// Blockwise 8-bit quantization on CUDA, equal bit for bit to bnb/core's CPU kernels (bnb/core/blockwise8.h):
// each block of BLOCKSIZE consecutive elements is scaled by its absolute maximum, and each scaled value becomes
// the code of its nearest codebook entry.
//
// Template arguments: T = float, bnb::half or bnb::bf16; BLOCKSIZE = power of two in [32, 4096]; THREADS = threads
// per CTA (power of two in [32, 1024]). Each thread owns PER consecutive elements of one quant block (PER = the
// larger of BLOCKSIZE / THREADS and one 16-byte vector), so G = BLOCKSIZE / PER threads share a block and a CTA
// handles THREADS / G blocks per step ("tile"); CTAs stride over the tiles (launch about as many CTAs as fit on the
// GPU at once). Loads and stores are 16-byte vectors, coalesced across the warp, all issued before use; buffers
// that are not 16-byte aligned, and the partial last block, take a guarded scalar path.
//
// Quantize runs in two launches: prepare_codebook8 (one CTA) prepares the codebook (256 floats in device memory,
// finite) as bnb::core::PrepareCodebook does - sorted values (a stable sort, ties mapped to the first code), the
// 255 midpoints - and builds codebook8.cuh's bucket table, all into a scratch buffer; quantize_blockwise8 copies
// that into each CTA's shared memory, divides by absmax with numerics.cuh's ScaleFast and finds codes in the
// table (an exact division and the midpoint search for the rare rest). Dequantize reads the codebook into shared
// memory itself. Host-side launch helpers: bnb/jit/blockwise8.h.
#pragma once

#include "bnb_common.cuh"
#include "codebook8.cuh"

namespace bnb {
namespace bw8 {

template <class T, int BLOCKSIZE, int THREADS>
struct Shape {
  static constexpr int VEC = Elem<T>::VEC;
  static constexpr int PER = (BLOCKSIZE / THREADS) > VEC ? (BLOCKSIZE / THREADS) : VEC;
  static constexpr int G = BLOCKSIZE / PER;  // threads per quant block
  static constexpr int QPT = THREADS / G;    // quant blocks per tile
  static constexpr int NV = PER / VEC;       // 16-byte vectors per thread
  static_assert(BLOCKSIZE >= 32 && BLOCKSIZE <= 4096 && (BLOCKSIZE & (BLOCKSIZE - 1)) == 0, "BLOCKSIZE");
  static_assert(THREADS >= 32 && THREADS <= 1024 && (THREADS & (THREADS - 1)) == 0, "THREADS");
  static_assert(G >= 1 && G <= THREADS && THREADS % G == 0 && PER % VEC == 0, "shape");
};

// Stores PER code bytes at p (aligned to min(PER, 16) bytes).
template <int PER>
__device__ __forceinline__ void store_codes(unsigned char* p, const unsigned char* c) {
  unsigned int w[PER / 4];
#pragma unroll
  for (int i = 0; i < PER / 4; ++i) {
    w[i] = (unsigned int)c[4 * i] | ((unsigned int)c[4 * i + 1] << 8) | ((unsigned int)c[4 * i + 2] << 16) |
           ((unsigned int)c[4 * i + 3] << 24);
  }
  if constexpr (PER % 16 == 0) {
#pragma unroll
    for (int i = 0; i < PER / 16; ++i) {
      Vec16 v;
      v.w[0] = w[4 * i];
      v.w[1] = w[4 * i + 1];
      v.w[2] = w[4 * i + 2];
      v.w[3] = w[4 * i + 3];
      store16(p + 16 * i, v);
    }
  } else if constexpr (PER == 8) {
    reinterpret_cast<unsigned long long*>(p)[0] = (unsigned long long)w[0] | ((unsigned long long)w[1] << 32);
  } else {
    reinterpret_cast<unsigned int*>(p)[0] = w[0];
  }
}

// Loads PER code bytes from p (aligned as above).
template <int PER>
__device__ __forceinline__ void load_codes(const unsigned char* p, unsigned char* c) {
  unsigned int w[PER / 4];
  if constexpr (PER % 16 == 0) {
#pragma unroll
    for (int i = 0; i < PER / 16; ++i) {
      const Vec16 v = reinterpret_cast<const Vec16*>(p)[i];
      w[4 * i] = v.w[0];
      w[4 * i + 1] = v.w[1];
      w[4 * i + 2] = v.w[2];
      w[4 * i + 3] = v.w[3];
    }
  } else if constexpr (PER == 8) {
    const unsigned long long v = reinterpret_cast<const unsigned long long*>(p)[0];
    w[0] = (unsigned int)v;
    w[1] = (unsigned int)(v >> 32);
  } else {
    w[0] = reinterpret_cast<const unsigned int*>(p)[0];
  }
#pragma unroll
  for (int i = 0; i < PER; ++i) c[i] = (unsigned char)(w[i / 4] >> (8 * (i % 4)));
}

__device__ __forceinline__ bool aligned(const void* p, unsigned long long a) {
  return ((unsigned long long)p & (a - 1)) == 0;
}

// bnb::core::ScaleToUnit: absmax 0 -> 0; +-inf -> +-1; else x / absmax, correctly rounded.
__device__ __forceinline__ float scale_to_unit(float x, float amax) {
  if (amax == 0.0f) return 0.0f;
  const unsigned int b = __float_as_uint(x);
  if (is_inf_bits(b)) return (b >> 31) ? -1.0f : 1.0f;
  return __fdiv_rn(x, amax);
}

// code[q] * absmax as the x86 host computes it, NaN bits included: a NaN absmax comes back quieted, and an invalid
// product (0 * inf) is the host's default NaN 0xFFC00000.
__device__ __forceinline__ float mul_like_host(float c, float a) {
  float p = __fmul_rn(c, a);
  if (is_nan_bits(__float_as_uint(p))) {
    const unsigned int ab = __float_as_uint(a);
    p = __uint_as_float(is_nan_bits(ab) ? (ab | 0x00400000u) : 0xFFC00000u);
  }
  return p;
}

// The code of x in a block of absmax `amax` by the exact route: bnb::core::ScaleToUnit, then the midpoint search
// (NaN, from a NaN absmax, has no midpoint below it: position 0). Out of line: the rare path of the kernel below.
__device__ BNB_NOINLINE unsigned char code_exact(float x, float amax, const float* mid, const unsigned char* s2c) {
  return s2c[cb8::SortedPosition(mid, scale_to_unit(x, amax))];
}

// The codebook as bnb::core::PrepareCodebook prepares it, plus codebook8.cuh's bucket table: written once per
// quantize call by prepare_codebook8 into a device scratch buffer (bnb::jit::kQuantizeBlockwise8ScratchBytes,
// 16-byte aligned), copied by every CTA of quantize_blockwise8 into shared memory.
//
// mid[255] doubles as a flag: +inf for a finite codebook, NaN when an entry was not finite. The CPU rejects such a
// codebook; here that would cost a device-to-host sync per call, so the kernels instead write NaN absmax for every
// block (it dequantizes to NaN: nothing comes back finite and wrong), and the codes, though meaningless, are still
// deterministic. No lookup can tell the two apart: mid[255] is only compared as s > mid[255], false for both.
struct __align__(16) Prepared {
  unsigned key[cb8::kTableSize];  // bucket table
  float mid[256];                  // the 255 splits SplitPoint(s[i], s[i+1]), ascending, and +inf (or NaN: above)
  unsigned char s2c[256];          // sorted position -> first code holding that value
};
static_assert(sizeof(Prepared) == 22784, "bnb::jit::kQuantizeBlockwise8ScratchBytes");

// True when the codebook behind `prep` held a non-finite entry (see Prepared).
__device__ __forceinline__ bool poisoned(const Prepared& prep) { return is_nan_bits(__float_as_uint(prep.mid[255])); }

// The code of x in a block of absmax amax through a prepared codebook (in shared memory): ordinary blocks (fast:
// FastScaleOk(amax), y = __frcp_rn(amax)) scale with numerics.cuh's ScaleFast and look the code up; nonzero
// quotients below 2^-19 (where ScaleFast may be an ulp off), values in marked buckets, and blocks of absmax 0, inf,
// NaN or beyond 2^+-60 take code_exact.
__device__ __forceinline__ unsigned char code_in_block(float x, float amax, bool fast, float y, const Prepared& prep) {
  if (fast) {
    const float s = ScaleFast(x, amax, y);
    unsigned c;
    if (cb8::LookupCode(prep.key, prep.mid, s, &c) && !(fabsf(s) < 0x1p-19f && x != 0.0f)) return (unsigned char)c;
  }
  return code_exact(x, amax, prep.mid, prep.s2c);
}

// code_in_block's table route alone, for a fast block (|x| <= amax, both finite): the code, and in *redo whether x
// must take code_exact instead (a marked bucket, or a nonzero quotient below 2^-19). Branch-free, so that the
// unrolled loop below is straight-line code with no call in it.
__device__ __forceinline__ unsigned code_fast(float x, float amax, float y, const Prepared& prep, bool* redo) {
  const float s = ScaleFast(x, amax, y);
  unsigned c;
  const bool ok = cb8::LookupCode(prep.key, prep.mid, s, &c);
  *redo = !ok || (fabsf(s) < 0x1p-19f && x != 0.0f);
  return c;
}

}  // namespace bw8
}  // namespace bnb

// Prepares `code` (256 floats, finite unless the caller erred) into *out; one CTA of THREADS = 256 threads. A
// strictly increasing codebook (the dynamic maps) is its own sorted order; others take a stable rank sort (256
// compares per value) under a total order, NaN above everything, so that the ranks are a permutation and every slot
// of the sorted arrays is written whatever the entries (with NaN ranked by <, two entries shared rank 0 and slot 255
// was never written). A non-finite entry marks the result (Prepared). A template only so that programs which do not
// name it (every other kernel includes this file) do not compile it.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) prepare_codebook8(const float* __restrict__ code,
                                                             bnb::bw8::Prepared* out) {
  using namespace bnb;
  static_assert(THREADS == 256, "one thread per codebook entry");
  __shared__ float s_val[256];
  __shared__ float s_sorted[256];
  __shared__ float s_mid[256];
  __shared__ unsigned char s_s2c[256];
  const int i = threadIdx.x;
  const float ci = code[i];
  s_val[i] = ci;
  // The barrier that publishes s_val also says whether every entry is finite.
  const bool finite = __syncthreads_and((__float_as_uint(ci) & 0x7FFFFFFFu) < 0x7F800000u) != 0;
  const bool increasing = __syncthreads_and(i == 255 || s_val[i] < s_val[i + 1]);
  if (increasing) {
    s_sorted[i] = s_val[i];
    s_s2c[i] = (unsigned char)i;
  } else {
    const float v = s_val[i];
    const bool v_nan = is_nan_bits(__float_as_uint(v));
    int rank = 0, first = i;
#pragma unroll 4
    for (int j = 0; j < 256; ++j) {
      const float w = s_val[j];
      // w before v: by value (ties by index); a number before any NaN; NaNs by index.
      const bool w_nan = is_nan_bits(__float_as_uint(w));
      const bool before = v_nan ? (!w_nan || j < i) : (!w_nan && (w < v || (w == v && j < i)));
      rank += before ? 1 : 0;
      if (w == v && j < first) first = j;
    }
    s_sorted[rank] = v;
    s_s2c[rank] = (unsigned char)first;
  }
  __syncthreads();
  if (i < 255) {
    const float lo = s_sorted[i], hi = s_sorted[i + 1];
    s_mid[i] = SplitPointOf(lo, hi, __fmul_rn(__fadd_rn(lo, hi), 0.5f));
  } else {
    s_mid[i] = __uint_as_float(0x7F800000u);
  }
  __syncthreads();
  out->mid[i] = i < 255 || finite ? s_mid[i] : __uint_as_float(0x7FC00000u);
  out->s2c[i] = s_s2c[i];
  // Each thread fills a run of neighbouring entries, so its searches walk a few steps from one to the next.
  constexpr int kRun = (cb8::kTableSize + THREADS - 1) / THREADS;
  const int begin = i * kRun;
  cb8::MakeEntries(s_mid, s_s2c, begin, begin + kRun < cb8::kTableSize ? begin + kRun : cb8::kTableSize, out->key);
}

// codes[i] = code nearest x[i] / absmax[block of i]; absmax[b] = max |x| over block b (NaN if the block holds NaN).
template <class T, int BLOCKSIZE, int THREADS>
__global__ void __launch_bounds__(THREADS)
    quantize_blockwise8(const T* __restrict__ x, const bnb::bw8::Prepared* __restrict__ prepared,
                        unsigned char* __restrict__ codes, float* __restrict__ absmax, long long n) {
  using namespace bnb;
  using S = bw8::Shape<T, BLOCKSIZE, THREADS>;
  constexpr int PER = S::PER, G = S::G, QPT = S::QPT, NV = S::NV, VEC = S::VEC;

  __shared__ bw8::Prepared s_prep;
  __shared__ unsigned int s_red[THREADS / 32];
  for (int i = threadIdx.x; i < (int)(sizeof(bw8::Prepared) / 16); i += THREADS) {
    reinterpret_cast<Vec16*>(&s_prep)[i] = reinterpret_cast<const Vec16*>(prepared)[i];
  }
  __syncthreads();
  const bool poisoned = bw8::poisoned(s_prep);

  const long long nblocks = (n + BLOCKSIZE - 1) / BLOCKSIZE;
  const long long ntiles = (nblocks + QPT - 1) / QPT;
  const int group = threadIdx.x / G;
  const int gl = threadIdx.x % G;
  const bool vec_ok = bw8::aligned(x, 16) && bw8::aligned(codes, PER >= 16 ? 16 : PER);

  for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const long long qb = tile * QPT + group;
    const long long start = qb * BLOCKSIZE + (long long)gl * PER;
    const bool active = qb < nblocks && start < n;
    const bool full = vec_ok && start + PER <= n;
    // max |x| as bits: for non-negative floats integer order is float order, and any NaN is above +inf.
    unsigned int mb = 0;
    float v[PER];
    if (active && full) {
      Vec16 raw[NV];
#pragma unroll
      for (int k = 0; k < NV; ++k) raw[k] = reinterpret_cast<const Vec16*>(x + start)[k];
#pragma unroll
      for (int k = 0; k < NV; ++k) Elem<T>::unpack(raw[k], v + k * VEC);
#pragma unroll
      for (int k = 0; k < PER; ++k) mb = max(mb, __float_as_uint(v[k]) & 0x7FFFFFFFu);
    } else if (active) {
      // Misaligned buffers and the partial last block: a compact element loop (it is read again below).
#pragma unroll 1
      for (int k = 0; k < PER && start + k < n; ++k) {
        mb = max(mb, __float_as_uint(Elem<T>::load(x + start + k)) & 0x7FFFFFFFu);
      }
    }
    const float amax = group_absmax<G>(mb, s_red, group);
    if (!active) continue;
    if (gl == 0) absmax[qb] = poisoned ? __uint_as_float(0x7FC00000u) : amax;
    const bool fast = FastScaleOk(amax);
    const float y = fast ? __frcp_rn(amax) : 0.0f;
    if (full && fast) {
      // Every code through the table, the few that need the exact route marked in `redo` (bit k % 32 of word
      // k / 32); the vector store; then those few again, x read from memory and each code stored on its own after
      // the vector (the same thread's later store to the byte wins). An exact path called inside the unrolled
      // loop cost ~36 instructions per element and 16 bytes of stack (issue 22); this one stays in registers.
      constexpr int kWords = (PER + 31) / 32;
      unsigned char c[PER];
      unsigned redo[kWords];
#pragma unroll
      for (int w = 0; w < kWords; ++w) redo[w] = 0;
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        bool r;
        c[k] = (unsigned char)bw8::code_fast(v[k], amax, y, s_prep, &r);
        redo[k / 32] |= (unsigned)r << (k % 32);
      }
      bw8::store_codes<PER>(codes + start, c);
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
#pragma unroll 1
        for (unsigned m = redo[w]; m != 0; m &= m - 1) {
          const int k = w * 32 + __ffs((int)m) - 1;
          codes[start + k] = bw8::code_exact(Elem<T>::load(x + start + k), amax, s_prep.mid, s_prep.s2c);
        }
      }
    } else {
      // Misaligned buffers, the partial last block, and blocks whose absmax needs the exact division (0, inf, NaN,
      // beyond 2^+-60): element by element, x read again.
#pragma unroll 1
      for (int k = 0; k < PER && start + k < n; ++k) {
        codes[start + k] = bw8::code_in_block(Elem<T>::load(x + start + k), amax, fast, y, s_prep);
      }
    }
  }
}

// out[i] = code[codes[i]] * absmax[block of i], computed in float, rounded to T (nearest even).
template <class T, int BLOCKSIZE, int THREADS>
__global__ void __launch_bounds__(THREADS)
    dequantize_blockwise8(const unsigned char* __restrict__ codes, const float* __restrict__ code,
                          const float* __restrict__ absmax, T* __restrict__ out, long long n) {
  using namespace bnb;
  using S = bw8::Shape<T, BLOCKSIZE, THREADS>;
  constexpr int PER = S::PER, G = S::G, QPT = S::QPT, NV = S::NV, VEC = S::VEC;

  __shared__ float s_val[256];
  for (int i = threadIdx.x; i < 256; i += THREADS) s_val[i] = code[i];
  __syncthreads();

  const long long nblocks = (n + BLOCKSIZE - 1) / BLOCKSIZE;
  const long long ntiles = (nblocks + QPT - 1) / QPT;
  const int group = threadIdx.x / G;
  const int gl = threadIdx.x % G;
  const bool vec_ok = bw8::aligned(out, 16) && bw8::aligned(codes, VEC);

  for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const long long qb = tile * QPT + group;
    const long long start = qb * BLOCKSIZE + (long long)gl * PER;
    if (qb >= nblocks || start >= n) continue;
    const float a = absmax[qb];
    if (vec_ok && (qb + 1) * BLOCKSIZE <= n) {
      // The thread's k-th 16-byte output vector is the block's vector k * G + gl: each store instruction of a warp
      // writes consecutive vectors (a thread's NV vectors side by side put a store's 32 lanes in 32 separate
      // sectors; tools/bench/NOTES.md, 'H100 check').
      const unsigned char* src = codes + qb * BLOCKSIZE + gl * VEC;
      T* dst = out + qb * BLOCKSIZE + gl * VEC;
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        unsigned char c[VEC];
        bw8::load_codes<VEC>(src + k * G * VEC, c);
        float v[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = bw8::mul_like_host(s_val[c[j]], a);
        store16(dst + k * G * VEC, Elem<T>::pack(v));
      }
    } else {
#pragma unroll 1
      for (int k = 0; k < PER && start + k < n; ++k) {
        Elem<T>::store(out + start + k, bw8::mul_like_host(s_val[codes[start + k]], a));
      }
    }
  }
}
