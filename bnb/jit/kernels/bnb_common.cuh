// Shared device code for bnb's kernel templates: element types, exact conversions to and from float that equal
// bnb/core/dtype.h bit for bit, 16-byte vectors. Compiled by NVRTC with no CUDA headers (none are needed).
#pragma once

#include "ptx_compat.cuh"

// __noinline__, spelled so that a host build (bnb/tests/cuda_emu.h) can say it its own way.
#ifndef BNB_NOINLINE
#define BNB_NOINLINE __noinline__
#endif

namespace bnb {

// Storage types: the kernels read and write raw bits and convert with the functions below, so the results do not
// depend on which cuda_fp16.h / cuda_bf16.h (if any) NVRTC provides.
struct half {
  unsigned short bits;
};
struct bf16 {
  unsigned short bits;
};

// 16 bytes, loaded and stored with one 128-bit instruction when aligned.
struct __align__(16) Vec16 {
  unsigned int w[4];
};

// Stores v at p (16-byte aligned, in global memory) with one 128-bit store. Assigning a Vec16, or even CUDA's
// uint4, can come out as four 32-bit stores (st.global.u32 in the PTX of dequantize_blockwise8 at 8 elements per
// thread, NVRTC 13.0), which take four store slots for one vector; the PTX store cannot be split.
__device__ __forceinline__ void store16(void* p, const Vec16& v) { ptx::st_global_v4(p, v.w); }

__device__ __forceinline__ bool is_nan_bits(unsigned int b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }
__device__ __forceinline__ bool is_inf_bits(unsigned int b) { return (b & 0x7FFFFFFFu) == 0x7F800000u; }

// bf16 widening is exact: the top half of a float.
__device__ __forceinline__ float bf16_to_float(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
// Round to nearest, ties to even; NaN -> 0x7FC0 (as bnb::core::FloatToBF16 and torch's c10::BFloat16).
__device__ __forceinline__ unsigned short float_to_bf16(float f) {
  const unsigned int b = __float_as_uint(f);
  if (is_nan_bits(b)) return 0x7FC0;
  return (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// IEEE binary16 widening (exact, subnormals included) by the hardware conversion.
__device__ __forceinline__ float half_to_float(unsigned short h) { return ptx::cvt_f32_f16(h); }
// Round to nearest even (overflow to inf, subnormals kept), NaN -> sign | 0x7E00 (as bnb::core::FloatToHalf).
__device__ __forceinline__ unsigned short float_to_half(float f) {
  const unsigned int b = __float_as_uint(f);
  if (is_nan_bits(b)) return (unsigned short)(((b >> 16) & 0x8000u) | 0x7E00u);
  return ptx::cvt_rn_f16_f32(f);
}

// Per-type loads and stores: VEC elements per 16-byte vector.
template <class T>
struct Elem;

template <>
struct Elem<float> {
  static constexpr int VEC = 4;
  __device__ __forceinline__ static float load(const float* p) { return *p; }
  __device__ __forceinline__ static void store(float* p, float v) { *p = v; }
  __device__ __forceinline__ static void unpack(const Vec16& v, float* out) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(v.w[i]);
  }
  __device__ __forceinline__ static Vec16 pack(const float* in) {
    Vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) v.w[i] = __float_as_uint(in[i]);
    return v;
  }
};

template <>
struct Elem<half> {
  static constexpr int VEC = 8;
  __device__ __forceinline__ static float load(const half* p) { return half_to_float(p->bits); }
  __device__ __forceinline__ static void store(half* p, float v) { p->bits = float_to_half(v); }
  __device__ __forceinline__ static void unpack(const Vec16& v, float* out) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = half_to_float((unsigned short)(v.w[i] & 0xFFFFu));
      out[2 * i + 1] = half_to_float((unsigned short)(v.w[i] >> 16));
    }
  }
  __device__ __forceinline__ static Vec16 pack(const float* in) {
    Vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v.w[i] = (unsigned int)float_to_half(in[2 * i]) | ((unsigned int)float_to_half(in[2 * i + 1]) << 16);
    }
    return v;
  }
};

template <>
struct Elem<bf16> {
  static constexpr int VEC = 8;
  __device__ __forceinline__ static float load(const bf16* p) { return bf16_to_float(p->bits); }
  __device__ __forceinline__ static void store(bf16* p, float v) { p->bits = float_to_bf16(v); }
  __device__ __forceinline__ static void unpack(const Vec16& v, float* out) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(v.w[i] << 16);
      out[2 * i + 1] = __uint_as_float(v.w[i] & 0xFFFF0000u);
    }
  }
  __device__ __forceinline__ static Vec16 pack(const float* in) {
    Vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v.w[i] = (unsigned int)float_to_bf16(in[2 * i]) | ((unsigned int)float_to_bf16(in[2 * i + 1]) << 16);
    }
    return v;
  }
};

// The absmax of a quant block handled by G threads (a power of two), from each thread's max of |x| as float bits:
// maxima of non-negative floats order like their bits, and any NaN (bits above inf) wins, coming back as the quiet
// NaN. G <= 32 reduces within the warp; larger groups meet in shared memory `s_red` (one slot per warp), which
// every thread of the CTA must reach, as the __syncthreads() below require. Every thread of the group gets it.
template <int G>
__device__ __forceinline__ float group_absmax(unsigned int mb, unsigned int* s_red, int group) {
  if constexpr (G <= 32) {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) mb = max(mb, __shfl_xor_sync(0xFFFFFFFFu, mb, off));
  } else {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mb = max(mb, __shfl_xor_sync(0xFFFFFFFFu, mb, off));
    if ((threadIdx.x & 31) == 0) s_red[threadIdx.x / 32] = mb;
    __syncthreads();
    constexpr int WPG = G / 32;  // warps per quant block
#pragma unroll
    for (int w = 0; w < WPG; ++w) mb = max(mb, s_red[group * WPG + w]);
    __syncthreads();
  }
  return __uint_as_float(mb > 0x7F800000u ? 0x7FC00000u : mb);
}

}  // namespace bnb
