// LLM.int8() passes on CUDA, equal bit for bit to bnb/core/int8.h's CPU ones (the rules: its header comment, or
// bnb/python/bnb/reference/int8.py). Every float operation that a rule rounds is an explicit round-to-nearest
// intrinsic, so the compiler can neither fuse nor reorder it.
//
// Template arguments: T = float, bnb::half or bnb::bf16 (the input, or the output of int8_dequantize_product);
// B = the bias's element type there; THREADS = threads per CTA (power of two in [32, 1024]). Row passes take a row
// per CTA, striding over rows; the others are element- or column-wise, striding over their range. Host side:
// bnb/jit/int8.h.
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

}  // namespace i8
}  // namespace bnb

// Each row: stats[r] = its absmax (outliers left out; the quiet NaN if it holds NaN), codes[r, :] its codes, and
// outlier_flags[k] = 1 for each column k holding an outlier (threshold > 0; the flags start at 0).
template <class T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    int8_quantize_rows(const T* __restrict__ x, long long rows, long long K, float threshold,
                       signed char* __restrict__ codes, float* __restrict__ stats,
                       unsigned char* __restrict__ outlier_flags) {
  using namespace bnb;
  __shared__ unsigned int s_red[THREADS / 32 > 0 ? THREADS / 32 : 1];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * K;
    unsigned int mb = 0;
    for (long long k = threadIdx.x; k < K; k += THREADS) {
      const float v = Elem<T>::load(row + k);
      if (i8::is_outlier(v, threshold)) outlier_flags[k] = 1;  // any thread may write the same 1
      mb = max(mb, i8::magnitude_bits(v, threshold));
    }
    const float absmax = group_absmax<THREADS>(mb, s_red, 0);
    const bool ok = i8::usable(absmax);
    const float scale = __fdiv_rn(127.0f, absmax);
    for (long long k = threadIdx.x; k < K; k += THREADS) {
      codes[r * K + k] = ok ? i8::code_of(__fmul_rn(Elem<T>::load(row + k), scale)) : (signed char)0;
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
    out[i] = __fmul_rn(__fmul_rn((float)codes[i], stats[i / K]), i8::kInv127);
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
    float v = __fmul_rn(__fmul_rn(__int2float_rn(A[i]), __fmul_rn(row_stats[i / N], col_stats[c])),
                        i8::kInv127Squared);
    if (bias != nullptr) v = __fadd_rn(v, Elem<B>::load(bias + c));
    Elem<T>::store(out + i, v);
  }
}
