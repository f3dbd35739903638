// LLM.int8() passes on CUDA, equal bit for bit to bnb/core/int8.h's CPU ones (the rules: its header comment, or
// bnb/python/bnb/reference/int8.py). Every float operation that a rule rounds is an explicit round-to-nearest
// intrinsic, so the compiler can neither fuse nor reorder it.
//
// Template arguments: T = float, bnb::half or bnb::bf16 (the input, or the output of int8_dequantize_product,
// int8_dequantize_columns and int8_scaled_gemv); B = the bias's element type there; R, C = int8_scaled_gemv's rows
// at most and columns a warp; THREADS = threads per CTA (power of two in [32, 1024]). Row passes take a row per CTA,
// striding over rows; the others are element- or column-wise, striding over their range, but int8_scaled_gemv,
// whose grid covers the columns once. Host side: bnb/jit/int8.h.
#pragma once

#include "bnb_common.cuh"

namespace bnb {
namespace i8 {

constexpr float kInv127 = 7.874015718698502e-3f;
constexpr float kInv127Squared = 6.200012285262346e-05f;

__device__ __forceinline__ bool is_outlier(float v, float threshold) {
  return threshold > 0.0f && fabsf(v) >= threshold;
}

// |v|'s bits, 0 for an outlier: as unsigned they order magnitudes, NaN above +inf.
__device__ __forceinline__ unsigned int magnitude_bits(float v, float threshold) {
  return is_outlier(v, threshold) ? 0u : (__float_as_uint(v) & 0x7FFFFFFFu);
}

__device__ __forceinline__ bool usable(float absmax) {
  const unsigned int b = __float_as_uint(absmax);
  return !is_nan_bits(b) && !is_inf_bits(b) && absmax > 0.0f;
}

// round-half-even(q), clamped to [-127, 127].
__device__ __forceinline__ signed char code_of(float q) {
  return (signed char)fminf(127.0f, fmaxf(-127.0f, rintf(q)));
}

// A code's value in its row: (code * stat) * (1/127), each product rounded once.
__device__ __forceinline__ float dequantized_code(signed char code, float stat) {
  return __fmul_rn(__fmul_rn((float)code, stat), kInv127);
}

// The product's epilogue: (float(a) * (row_stat * col_stat)) * (1/127^2), plus the bias where there is one (bias
// null: none), each operation rounded once.
template <class B>
__device__ __forceinline__ float dequantized_product(int a, float row_stat, float col_stat, const B* bias,
                                                     long long c) {
  float v = __fmul_rn(__fmul_rn(__int2float_rn(a), __fmul_rn(row_stat, col_stat)), kInv127Squared);
  if (bias != nullptr) v = __fadd_rn(v, Elem<B>::load(bias + c));
  return v;
}

// One step of warp_sum_scatter: a lane holding N of the sums keeps N / 2, trading the other half with the lane
// `off` away (N = 1: both keep their sum of the two).
template <int P, int N>
__device__ __forceinline__ void sum_scatter_step(int (&v)[P], int lane, int off, int& first) {
  if constexpr (N > 1) {
    constexpr int half = N / 2;
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const int send = upper ? v[j] : v[j + half];
      const int keep = upper ? v[j + half] : v[j];
      v[j] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, off);
    }
    if (upper) first += half;
  } else {
    v[0] += __shfl_xor_sync(0xFFFFFFFFu, v[0], off);
  }
}

// The warp's sums of P int32 values (P a power of two), scattered: after five steps each lane holds P / 32 sums (or
// one, shared by 32 / P lanes), those of indices first, first + 1, ...; returns first, and v[0 .. max(P / 32, 1))
// hold them. 62 shuffles for P = 64, where summing each value across the warp takes 320. The steps are templates so
// that every index into v is a constant (v stays in registers).
template <int P>
__device__ __forceinline__ int warp_sum_scatter(int (&v)[P], int lane) {
  int first = 0;
  sum_scatter_step<P, P>(v, lane, 16, first);
  sum_scatter_step<P, (P >> 1 > 1 ? P >> 1 : 1)>(v, lane, 8, first);
  sum_scatter_step<P, (P >> 2 > 1 ? P >> 2 : 1)>(v, lane, 4, first);
  sum_scatter_step<P, (P >> 3 > 1 ? P >> 3 : 1)>(v, lane, 2, first);
  sum_scatter_step<P, (P >> 4 > 1 ? P >> 4 : 1)>(v, lane, 1, first);
  return first;
}

}  // namespace i8
}  // namespace bnb

// Each row: stats[r] = its absmax (outliers left out; the quiet NaN if it holds NaN), codes[r, :] its codes, and
// outlier_flags[k] = 1 for each column k holding an outlier (threshold > 0; the flags start at 0; null without
// a threshold, as nothing is flagged then). A single row (a decode step) is all the flags say: its CTA writes every
// flag, 0 or 1 (they need not start at 0), and the codes of its outliers as 0, which is all the zeroing of the
// outlier columns would do, so the host launches neither.
template <class T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_quantize_rows(const T* __restrict__ x, long long rows, long long K, float threshold,
                       signed char* __restrict__ codes, float* __restrict__ stats,
                       unsigned char* __restrict__ outlier_flags) {
  using namespace bnb;
  __shared__ unsigned int s_red[THREADS / 32 > 0 ? THREADS / 32 : 1];
  const bool single = rows == 1 && outlier_flags != nullptr;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * K;
    unsigned int mb = 0;
    for (long long k = threadIdx.x; k < K; k += THREADS) {
      const float v = Elem<T>::load(row + k);
      const bool outlier = i8::is_outlier(v, threshold);
      if (single) {
        outlier_flags[k] = outlier ? 1 : 0;
      } else if (outlier) {
        outlier_flags[k] = 1;  // any thread may write the same 1
      }
      mb = max(mb, i8::magnitude_bits(v, threshold));
    }
    const float absmax = group_absmax<THREADS>(mb, s_red, 0);
    const bool ok = i8::usable(absmax);
    const float scale = __fdiv_rn(127.0f, absmax);
    for (long long k = threadIdx.x; k < K; k += THREADS) {
      const float v = Elem<T>::load(row + k);
      codes[r * K + k] = ok && !(single && i8::is_outlier(v, threshold)) ? i8::code_of(__fmul_rn(v, scale))
                                                                          : (signed char)0;
    }
    if (threadIdx.x == 0) stats[r] = absmax;
  }
}

// col_absmax (as unsigned bits, starting at 0) = max over rows of |x[r, k]|, outliers as 0: a thread per column
// and chunk of rows_per_cta rows (blockIdx.y), merged by atomicMax.
template <class T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_column_absmax(const T* __restrict__ x, long long rows, long long K, float threshold, long long rows_per_cta,
                       unsigned int* __restrict__ col_absmax) {
  using namespace bnb;
  const long long k = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (k >= K) return;
  const long long r0 = (long long)blockIdx.y * rows_per_cta;
  const long long r1 = r0 + rows_per_cta < rows ? r0 + rows_per_cta : rows;
  unsigned int mb = 0;
  for (long long r = r0; r < r1; ++r) mb = max(mb, i8::magnitude_bits(Elem<T>::load(x + r * K + k), threshold));
  atomicMax(col_absmax + k, mb);
}

// codes[r, k] = round-half-even((x * 127) / col_absmax[k]) (outliers as 0), 0 where col_absmax[k] is not usable.
template <class T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_quantize_columns(const T* __restrict__ x, long long n, long long K, float threshold,
                          const float* __restrict__ col_absmax, signed char* __restrict__ codes) {
  using namespace bnb;
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
    const float raw = Elem<T>::load(x + i);
    const float v = i8::is_outlier(raw, threshold) ? 0.0f : raw;
    const float a = col_absmax[i % K];
    codes[i] = i8::usable(a) ? i8::code_of(__fdiv_rn(__fmul_rn(v, 127.0f), a)) : (signed char)0;
  }
}

// out[r, k] = (codes[r, k] * stats[r]) * (1/127), float32.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_dequantize_rows(const signed char* __restrict__ codes, const float* __restrict__ stats, long long n,
                         long long K, float* __restrict__ out) {
  using namespace bnb;
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
    out[i] = i8::dequantized_code(codes[i], stats[i / K]);
  }
}

// out[r, j] = (codes[r, cols[j]] * stats[r]) * (1/127), rounded once to T: a weight's outlier columns for
// int8_mixed_scaled_mm, gathered and dequantized in one pass (cols checked by the host, each in [0, K)).
template <class T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_dequantize_columns(const signed char* __restrict__ codes, long long K, const float* __restrict__ stats,
                            const long long* __restrict__ cols, long long n_cols, long long n, T* __restrict__ out) {
  using namespace bnb;
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
    const long long r = i / n_cols;
    Elem<T>::store(out + i, i8::dequantized_code(codes[r * K + cols[i % n_cols]], stats[r]));
  }
}

// out[r, c] = (float(A[r, c]) * (row_stats[r] * col_stats[c])) * (1/127^2) (+ bias[c] when bias is not null),
// rounded once to T.
template <class T, class B, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_dequantize_product(const int* __restrict__ A, const float* __restrict__ row_stats,
                            const float* __restrict__ col_stats, const B* __restrict__ bias, long long n, long long N,
                            T* __restrict__ out) {
  using namespace bnb;
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
    const long long c = i % N;
    Elem<T>::store(out + i, i8::dequantized_product(A[i], row_stats[i / N], col_stats[c], bias, c));
  }
}

// out[m, n] = the int32 product of A's row m and W's row n, dequantized as int8_dequantize_product does (bit for
// bit: the sum is exact in any order). The small-batch path: M <= R rows of codes A [M, K] against the weight's
// codes W [N, K], both 16-byte aligned with K a multiple of 16; the weight is read once, with no padded copy and no
// int32 product in memory. A warp takes C columns: each lane 16 bytes of each row a step (dp4a on four bytes at a
// time), then the warp sums (warp_sum_scatter) and each result is stored by one lane.
template <class T, class B, int R, int C, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_scaled_gemv(const signed char* __restrict__ A, const signed char* __restrict__ W,
                     const float* __restrict__ row_stats, const float* __restrict__ col_stats,
                     const B* __restrict__ bias, int M, long long N, long long K, T* __restrict__ out) {
  using namespace bnb;
  constexpr int P = R * C;  // sums a warp makes, index m * C + c
  const int lane = threadIdx.x & 31;
  const long long n0 = ((long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32) * C;
  if (n0 >= N) return;  // the whole warp
  int acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0;
  // One row: loads of the weight in flight from two steps; more rows: their dot products keep the loads busy.
#pragma unroll(R == 1 ? 2 : 1)
  for (long long k = (long long)lane * 16; k < K; k += 32 * 16) {
    unsigned w[C][4];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (n0 + c < N) {
        ptx::ld_global_nc_no_allocate_v4(W + (n0 + c) * K + k, w[c]);  // read once: kept out of L1
      } else {
        w[c][0] = w[c][1] = w[c][2] = w[c][3] = 0u;
      }
    }
#pragma unroll
    for (int m = 0; m < R; ++m) {
      if (m < M) {
        const Vec16 a = *reinterpret_cast<const Vec16*>(A + m * K + k);  // read by every warp: cached
#pragma unroll
        for (int c = 0; c < C; ++c) {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[m * C + c] = ptx::dp4a_s32(a.w[i], w[c][i], acc[m * C + c]);
        }
      }
    }
  }
  const int first = i8::warp_sum_scatter<P>(acc, lane);
  if (P < 32 && (lane & (32 / P - 1)) != 0) return;  // a copy of another lane's sums
#pragma unroll
  for (int j = 0; j < (P < 32 ? 1 : P / 32); ++j) {
    const int m = (first + j) / C;
    const long long n = n0 + (first + j) % C;
    if (m < M && n < N) {
      Elem<T>::store(out + m * N + n, i8::dequantized_product(acc[j], row_stats[m], col_stats[n], bias, n));
    }
  }
}
