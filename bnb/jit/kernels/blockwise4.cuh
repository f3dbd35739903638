// Blockwise 4-bit quantization (NF4, FP4) and the 4-bit matrix-vector product on CUDA. Quantize and dequantize
// equal bnb/core's CPU kernels (bnb/core/blockwise4.h) bit for bit; gemv4 equals bnb/core/gemv4.h's definition up to
// float32 summation order (it sums in its own order, like the vectorized CPU kernel).
//
// Packing (bitsandbytes'): byte k holds element 2k in its high nibble and element 2k + 1 in its low nibble; an odd
// element count fills the last low nibble with the code of 0.0 (bnb::core::PadCode4), as bitsandbytes' kernel
// does. Blocksizes are even, so quant block b owns bytes [b * BLOCKSIZE / 2, ..).
//
// quantize_blockwise4 / dequantize_blockwise4 share blockwise8.cuh's layout: each thread owns PER consecutive
// elements of one quant block (PER = the larger of BLOCKSIZE / THREADS and two 16-byte vectors, so a thread has 32
// bytes of input in flight), G = BLOCKSIZE / PER threads share a block, CTAs stride over tiles of THREADS / G blocks.
// Buffers that are not aligned, and the partial last block, take a guarded element path.
//
// Quantize scales exactly as bnb::core::ScaleToUnit (a correctly rounded division; numerics.cuh's ScaleFast for
// ordinary absmax values, __fdiv_rn otherwise) and finds the code with codebook4.cuh's bucket table in shared memory:
// one load and one compare per element instead of a 15-midpoint search, which keeps the kernel memory-bound.
//
// Host-side launch helpers: bnb/jit/blockwise4.h.
#pragma once

#include "bnb_common.cuh"
#include "blockwise8.cuh"
#include "codebook4.cuh"
#include "ptx_compat.cuh"

namespace bnb {
namespace bw4 {

template <class T, int BLOCKSIZE, int THREADS>
struct Shape {
  static constexpr int VEC = Elem<T>::VEC;
  static constexpr int MINPER = 2 * VEC;
  static constexpr int PER = (BLOCKSIZE / THREADS) > MINPER ? (BLOCKSIZE / THREADS) : MINPER;
  static constexpr int G = BLOCKSIZE / PER;  // threads per quant block
  static constexpr int QPT = THREADS / G;    // quant blocks per tile
  static constexpr int NV = PER / VEC;       // 16-byte input vectors per thread
  static constexpr int BYTES = PER / 2;      // packed bytes per thread
  static_assert(BLOCKSIZE >= 32 && BLOCKSIZE <= 4096 && (BLOCKSIZE & (BLOCKSIZE - 1)) == 0, "BLOCKSIZE");
  static_assert(THREADS >= 32 && THREADS <= 1024 && (THREADS & (THREADS - 1)) == 0, "THREADS");
  static_assert(G >= 1 && G <= THREADS && THREADS % G == 0 && PER % VEC == 0 && BYTES >= 4, "shape");
};

// max |x| over 16-byte vectors, as raw magnitude bits of T (integer order is value order for magnitudes, and any
// NaN is above inf; two halfwords at a time for 16-bit types), then as float bits: the absmax reduction runs on these.
template <class T>
__device__ __forceinline__ unsigned abs_bits_acc(const Vec16& v, unsigned m) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) m = max(m, v.w[i] & 0x7FFFFFFFu);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) m = ptx::max_u16x2(m, v.w[i] & 0x7FFF7FFFu);
  }
  return m;
}
__device__ __forceinline__ unsigned abs_bits_to_float(const float*, unsigned m) { return m; }
__device__ __forceinline__ unsigned abs_bits_to_float(const bf16*, unsigned m) {
  return max(m & 0xFFFFu, m >> 16) << 16;  // bf16 widening: exact, NaN stays NaN
}
__device__ __forceinline__ unsigned abs_bits_to_float(const half*, unsigned m) {
  return __float_as_uint(half_to_float((unsigned short)max(m & 0xFFFFu, m >> 16)));
}

// code16[c] * a as the x86 host computes it (bnb::core::DequantizeBlockwise4Scalar), NaN bits included: a NaN
// operand comes back quieted (absmax's if both are NaN), an invalid product (0 * inf) is the default NaN 0xFFC00000.
__device__ __forceinline__ float mul_like_host(float c, float a) {
  float p = __fmul_rn(c, a);
  if (is_nan_bits(__float_as_uint(p))) {
    const unsigned ab = __float_as_uint(a), cb = __float_as_uint(c);
    p = __uint_as_float(is_nan_bits(ab) ? (ab | 0x00400000u) : is_nan_bits(cb) ? (cb | 0x00400000u) : 0xFFC00000u);
  }
  return p;
}

// Loads BYTES (a power of two >= 4) packed bytes from p, aligned to min(BYTES, 16), as little-endian words.
template <int BYTES>
__device__ __forceinline__ void load_words(const unsigned char* p, unsigned* w) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      const Vec16 v = reinterpret_cast<const Vec16*>(p)[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) w[4 * i + k] = v.w[k];
    }
  } else if constexpr (BYTES == 8) {
    const unsigned long long v = reinterpret_cast<const unsigned long long*>(p)[0];
    w[0] = (unsigned)v;
    w[1] = (unsigned)(v >> 32);
  } else {
    static_assert(BYTES == 4, "BYTES");
    w[0] = reinterpret_cast<const unsigned*>(p)[0];
  }
}

// code table entry at a byte offset (4 * code).
__device__ __forceinline__ float lut_at(const float* lut, unsigned byte_offset) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const char*>(lut) + byte_offset);
}

// The bucket table of QUANT in device memory, computed at compile time (codebook4.cuh).
template <int QUANT>
__device__ const cb4::KeyTable kKeyTable = cb4::MakeKeyTable(QUANT);

// ---- gemv ----

template <class T, int THREADS, int ROWS>
struct GemvShape {
  static constexpr int VEC = Elem<T>::VEC;                 // elements of A per 16-byte chunk
  static constexpr int CPL = 32 / VEC;                     // chunks of A per 32 weights (16 bytes of B): 4 or 8
  static constexpr int SWZ = CPL == 4 ? 2 : 3;             // log2(CPL)
  static constexpr int KT = 32768 / (int)sizeof(T);        // A tile in shared memory: 32 KB
  static constexpr int WARPS = THREADS / 32;
  static constexpr int U = 2;                              // 16-byte pieces per lane per row in flight
  static_assert(THREADS >= 32 && THREADS <= 1024 && (THREADS & (THREADS - 1)) == 0, "THREADS");
  static_assert(ROWS >= 1 && ROWS <= 8, "ROWS");
  static_assert(CPL * VEC == 32, "CPL");
};

// Shared-memory slot of A chunk c. Lane l reads chunks l * CPL + i (i = 0 .. CPL-1) with one 16-byte load per i;
// unswizzled, the 8 lanes of a quarter-warp would hit the same 4 banks. XOR-ing the low 3 bits with l's low 3 bits
// spreads them over all 32 banks; a bijection within each group of 8 chunks, so writers and readers agree.
template <int SWZ>
__device__ __forceinline__ int a_slot(int c) {
  return c ^ ((c >> SWZ) & 7);
}

// B is read once: stream it past L1.
__device__ __forceinline__ Vec16 load_stream(const void* p) {
  Vec16 v;
  ptx::ld_global_nc_no_allocate_v4(p, v.w);
  return v;
}

}  // namespace bw4
}  // namespace bnb

// packed: two codes per byte (see top); absmax[b] = max |x| over block b (NaN if the block holds NaN).
// QUANT: bnb::cb4::kNF4 (0) or kFP4 (1).
template <class T, int BLOCKSIZE, int THREADS, int QUANT>
__global__ void __launch_bounds__(THREADS)
    quantize_blockwise4(const T* __restrict__ x, unsigned char* __restrict__ packed, float* __restrict__ absmax,
                        long long n) {
  using namespace bnb;
  using S = bw4::Shape<T, BLOCKSIZE, THREADS>;
  constexpr int PER = S::PER, G = S::G, QPT = S::QPT, NV = S::NV, VEC = S::VEC, BYTES = S::BYTES;
  static_assert(QUANT == cb4::kNF4 || QUANT == cb4::kFP4, "QUANT");
  constexpr cb4::Codebook4Tables kT = cb4::MakeCodebook4Tables(QUANT);

  __shared__ unsigned long long s_key[cb4::kKeyTableSize];
  __shared__ unsigned int s_red[THREADS / 32];

  // Only the 104 keys a scaled value in [-1, 1] can have are filled in (the others are never read), from the table
  // the compiler computed.
  for (int i = threadIdx.x; i < cb4::kKeysUsed; i += THREADS) {
    s_key[cb4::UsedKey(i) - cb4::kKeyMin] = bw4::kKeyTable<QUANT>.entry[i];
  }
  __syncthreads();

  const long long nblocks = (n + BLOCKSIZE - 1) / BLOCKSIZE;
  const long long ntiles = (nblocks + QPT - 1) / QPT;
  const int group = threadIdx.x / G;
  const int gl = threadIdx.x % G;
  const bool vec_ok = bw8::aligned(x, 16) && bw8::aligned(packed, BYTES >= 16 ? 16 : BYTES);

  for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const long long qb = tile * QPT + group;
    const long long start = qb * BLOCKSIZE + (long long)gl * PER;
    const bool active = qb < nblocks && start < n;
    const bool full = vec_ok && start + PER <= n;
    unsigned mb = 0;  // max |x| as float bits
    Vec16 raw[NV];
    if (active && full) {
#pragma unroll
      for (int k = 0; k < NV; ++k) raw[k] = reinterpret_cast<const Vec16*>(x + start)[k];
      unsigned m = 0;
#pragma unroll
      for (int k = 0; k < NV; ++k) m = bw4::abs_bits_acc<T>(raw[k], m);
      mb = bw4::abs_bits_to_float(x, m);
    } else if (active) {
#pragma unroll 1
      for (int k = 0; k < PER && start + k < n; ++k) {
        mb = max(mb, __float_as_uint(Elem<T>::load(x + start + k)) & 0x7FFFFFFFu);
      }
    }
    const float amax = group_absmax<G>(mb, s_red, group);
    if (!active) continue;
    if (gl == 0) absmax[qb] = amax;

    const bool fast = FastScaleOk(amax);
    const float y = fast ? __frcp_rn(amax) : 0.0f;
    if (full && fast) {
      float v[PER];
#pragma unroll
      for (int k = 0; k < NV; ++k) Elem<T>::unpack(raw[k], v + k * VEC);
      unsigned char b[BYTES];
#pragma unroll
      for (int j = 0; j < BYTES; ++j) {
        const unsigned hi = cb4::LookupCode(s_key, ScaleFast(v[2 * j], amax, y));
        const unsigned lo = cb4::LookupCode(s_key, ScaleFast(v[2 * j + 1], amax, y));
        b[j] = (unsigned char)((hi << 4) | lo);
      }
      bw8::store_codes<BYTES>(packed + start / 2, b);
    } else {
      // Misaligned buffers, the partial last block, and blocks whose absmax needs the exact division (rare: 0,
      // inf, NaN, or beyond 2^+-60); x is read again, element by element. start is even, so each pair fills one
      // byte, and an odd n's last low nibble takes the code of 0.0.
      const auto code_any = [&](float v) -> unsigned {
        if (fast) return cb4::LookupCode(s_key, ScaleFast(v, amax, y));
        // bnb::core::ScaleToUnit, then the code; NaN (x / NaN) takes the lowest value's code, as the midpoint
        // count gives it.
        const float s = bw8::scale_to_unit(v, amax);
        return is_nan_bits(__float_as_uint(s)) ? (unsigned)kT.s2c[0] : cb4::LookupCode(s_key, s);
      };
#pragma unroll 1
      for (int k = 0; k < PER && start + k < n; k += 2) {
        const unsigned hi = code_any(Elem<T>::load(x + start + k));
        const unsigned lo =
            start + k + 1 < n ? code_any(Elem<T>::load(x + start + k + 1)) : cb4::LookupCode(s_key, 0.0f);
        packed[(start + k) / 2] = (unsigned char)((hi << 4) | lo);
      }
    }
  }
}

// out[i] = code16[code of i] * absmax[block of i], computed in float (one rounding), rounded to T (nearest even).
// code16: 16 floats in code order, in device memory.
template <class T, int BLOCKSIZE, int THREADS>
__global__ void __launch_bounds__(THREADS)
    dequantize_blockwise4(const unsigned char* __restrict__ packed, const float* __restrict__ code16,
                          const float* __restrict__ absmax, T* __restrict__ out, long long n) {
  using namespace bnb;
  using S = bw4::Shape<T, BLOCKSIZE, THREADS>;
  constexpr int PER = S::PER, G = S::G, QPT = S::QPT, NV = S::NV, VEC = S::VEC;

  __shared__ float s_code[16];
  const float cv = threadIdx.x < 16 ? code16[threadIdx.x] : 0.0f;
  if (threadIdx.x < 16) s_code[threadIdx.x] = cv;
  // With finite code values and a finite absmax no product is NaN, and the plain multiply is the host's.
  const bool code_finite = __syncthreads_and((__float_as_uint(cv) & 0x7FFFFFFFu) < 0x7F800000u) != 0;

  const long long nblocks = (n + BLOCKSIZE - 1) / BLOCKSIZE;
  const long long ntiles = (nblocks + QPT - 1) / QPT;
  const int group = threadIdx.x / G;
  const int gl = threadIdx.x % G;
  // A 16-byte output vector (VEC elements) comes from VEC / 2 packed bytes: 2 (float32) or 4.
  constexpr int VB = VEC / 2;
  const bool vec_ok = bw8::aligned(out, 16) && bw8::aligned(packed, VB);

  for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const long long qb = tile * QPT + group;
    const long long start = qb * BLOCKSIZE + (long long)gl * PER;
    if (qb >= nblocks || start >= n) continue;
    const float a = absmax[qb];
    const bool plain = code_finite && (__float_as_uint(a) & 0x7FFFFFFFu) < 0x7F800000u;
    if (vec_ok && (qb + 1) * BLOCKSIZE <= n) {
      // The thread's k-th 16-byte output vector is the block's vector k * G + gl: each store instruction of a warp
      // writes consecutive vectors (a thread's NV vectors side by side put a store's 32 lanes in 32 separate
      // sectors; tools/bench/NOTES.md, 'H100 check').
      const unsigned char* src = packed + qb * (BLOCKSIZE / 2) + gl * VB;
      T* dst = out + qb * BLOCKSIZE + gl * VEC;
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const unsigned w = VB == 4 ? *reinterpret_cast<const unsigned*>(src + k * G * VB)
                                   : (unsigned)*reinterpret_cast<const unsigned short*>(src + k * G * VB);
        // hi4 / lo4: 4 * each byte's high / low nibble, in its byte: one byte extract per element gives the offset.
        const unsigned hi4 = (w >> 2) & 0x3C3C3C3Cu, lo4 = (w << 2) & 0x3C3C3C3Cu;
        float c[VEC];
#pragma unroll
        for (int t = 0; t < VB; ++t) {
          c[2 * t] = bw4::lut_at(s_code, __byte_perm(hi4, 0u, 0x4440u + t));
          c[2 * t + 1] = bw4::lut_at(s_code, __byte_perm(lo4, 0u, 0x4440u + t));
        }
        float v[VEC];
        if (plain) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[j] = __fmul_rn(c[j], a);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[j] = bw4::mul_like_host(c[j], a);
        }
        store16(dst + k * G * VEC, Elem<T>::pack(v));
      }
    } else {
#pragma unroll 1
      for (int k = 0; k < PER && start + k < n; ++k) {
        const long long i = start + k;
        const unsigned byte = packed[i >> 1];
        const unsigned c = (i & 1) ? (byte & 15u) : (byte >> 4);
        Elem<T>::store(out + i, bw4::mul_like_host(s_code[c], a));
      }
    }
  }
}

// out[m] = sum_k A[k] * W[m, k] for m < N, W (N x K) quantized as one flat tensor of N * K elements (block of
// (m, k) = (m * K + k) >> lg_blocksize, blocks may run across row ends), W[m, k] = code16[code] * absmax[block].
// A and out: T; products and sums in float32; out rounded once to T.
//
// Each warp owns ROWS consecutive rows; a CTA owns WARPS * ROWS rows (grid = ceil(N / (WARPS * ROWS))). When
// K % 32 == 0 and A and B are 16-byte aligned (every row then starts on a 16-byte boundary and every 32 weights lie
// in one quant block), lane l takes 16-byte pieces l, l + 32, ... of each row (coalesced), decodes the 32 nibbles
// through code16 in shared memory, multiplies them with A from a shared-memory tile (swizzled: conflict-free
// 16-byte reads) and scales each piece's sum by its absmax once; the lanes' sums meet by warp shuffles. Other
// shapes take a per-element path. A is staged KT elements at a time.
//
// Two pieces per lane per row are loaded before any is used (GemvShape::U), within 64 registers so that 4 CTAs of
// 256 threads fit an SM and an 8192-row weight runs in one wave of 512 CTAs (H100, 1 x 8192 times 8192 x 8192 /
// 28672 x 8192 bf16: 20.8 -> 19.6 / 66.4 -> 61.3 us against U = 1; without the register bound, 80 registers and
// 3 CTAs per SM).
template <class T, int THREADS, int ROWS>
__global__ void __launch_bounds__(THREADS, 1024 / THREADS)
    gemv4(const T* __restrict__ A, const unsigned char* __restrict__ B, const float* __restrict__ absmax,
          const float* __restrict__ code16, T* __restrict__ out, long long N, long long K, int lg_blocksize) {
  using namespace bnb;
  using GS = bw4::GemvShape<T, THREADS, ROWS>;
  constexpr int VEC = GS::VEC, CPL = GS::CPL, SWZ = GS::SWZ, KT = GS::KT, WARPS = GS::WARPS, U = GS::U;

  __shared__ float s_lut[16];
  __shared__ Vec16 s_a[KT / VEC];

  if (threadIdx.x < 16) s_lut[threadIdx.x] = code16[threadIdx.x];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const long long row0 = ((long long)blockIdx.x * WARPS + warp) * ROWS;
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;

  const bool fast = (K % 32) == 0 && bw8::aligned(B, 16) && bw8::aligned(A, 16);
  if (fast) {
    // Start each lane's first piece of B on its way to L2 while A is staged (no B load issues before the staging
    // barrier otherwise).
    if (32LL * lane < K) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (row0 + r < N) ptx::prefetch_global_l2(B + (((row0 + r) * K + 32LL * lane) >> 1));
      }
    }
    for (long long k0 = 0; k0 < K; k0 += KT) {
      const int kt = (int)(K - k0 < KT ? K - k0 : KT);
      __syncthreads();  // the previous tile is no longer read (and, the first time, s_lut is written)
      const int nchunks = kt / VEC;
      for (int c = threadIdx.x; c < nchunks; c += THREADS) {
        s_a[bw4::a_slot<SWZ>(c)] = reinterpret_cast<const Vec16*>(A + k0)[c];
      }
      __syncthreads();
      const int npieces = kt / 32;
      for (int j0 = lane; j0 < npieces; j0 += 32 * U) {
        // All of this step's B and absmax loads first, so they are in flight together.
        Vec16 q[U][ROWS];
        float am[U][ROWS];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int j = j0 + 32 * u;
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            const long long m = row0 + r;
            if (m < N && j < npieces) {
              const long long f = m * K + k0 + 32LL * j;
              q[u][r] = bw4::load_stream(B + (f >> 1));
              am[u][r] = __ldg(absmax + (f >> lg_blocksize));
            } else {
              q[u][r] = Vec16{{0u, 0u, 0u, 0u}};
              am[u][r] = 0.0f;
            }
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int j = j0 + 32 * u;
          if (j >= npieces) break;
          float a[32];
          // a_slot(j * CPL + i) == (j * CPL ^ (j & 7)) ^ i, as i < CPL: one XOR per chunk.
          const unsigned base = ((unsigned)j * CPL) ^ ((unsigned)j & 7u);
#pragma unroll
          for (int i = 0; i < CPL; ++i) Elem<T>::unpack(s_a[base ^ (unsigned)i], a + i * VEC);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            // Byte t of the piece holds weights 2t (high nibble) and 2t + 1 (low nibble). hi4 / lo4 hold 4 * each
            // nibble in its byte: one byte extract per weight gives the byte offset into s_lut.
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int w = 0; w < 4; ++w) {
              const unsigned word = q[u][r].w[w];
              const unsigned hi4 = (word >> 2) & 0x3C3C3C3Cu, lo4 = (word << 2) & 0x3C3C3C3Cu;
#pragma unroll
              for (int t = 0; t < 4; ++t) {
                s0 = __fmaf_rn(a[8 * w + 2 * t], bw4::lut_at(s_lut, __byte_perm(hi4, 0u, 0x4440u + t)), s0);
                s1 = __fmaf_rn(a[8 * w + 2 * t + 1], bw4::lut_at(s_lut, __byte_perm(lo4, 0u, 0x4440u + t)), s1);
              }
            }
            acc[r] = __fmaf_rn(__fadd_rn(s0, s1), am[u][r], acc[r]);
          }
        }
      }
    }
  } else {
    // Rows that start mid-byte or off a 16-byte boundary, or A off one: one weight at a time, lanes striding
    // over k.
    __syncthreads();
#pragma unroll 1
    for (int r = 0; r < ROWS; ++r) {
      const long long m = row0 + r;
      if (m >= N) break;
      float s = 0.0f;
#pragma unroll 1
      for (long long k = lane; k < K; k += 32) {
        const long long f = m * K + k;
        const unsigned byte = B[f >> 1];
        const unsigned c = (f & 1) ? (byte & 15u) : (byte >> 4);
        const float w = __fmul_rn(s_lut[c], absmax[f >> lg_blocksize]);
        s = __fadd_rn(s, __fmul_rn(Elem<T>::load(A + k), w));
      }
      acc[r] = s;
    }
  }

#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float v = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
    const long long m = row0 + r;
    if (lane == 0 && m < N) Elem<T>::store(out + m, v);
  }
}
