// Every inline-assembly (PTX) instruction the kernels use, each behind a wrapper that says what it does and which
// architectures have it; the kernels call these and hold no asm of their own. A port to another GPU (a ROCm build)
// replaces the bodies here, or falls back to the portable code some wrappers already carry. Under
// BNB_CUDA_EMULATION (bnb/tests/cuda_emu.h: the kernels run on the host in tests) each has a host body.
//
// "Every target" below means every architecture NVRTC 13 compiles for (sm_75 on); NVRTC 12 also reaches older
// ones, where the exceptions noted apply.
#pragma once

namespace bnb {
namespace ptx {

// cvt.f32.f16: IEEE binary16 bits to float, exact (subnormals included). Every target.
__device__ __forceinline__ float cvt_f32_f16(unsigned short h) {
#if defined(BNB_CUDA_EMULATION)
  return static_cast<float>(__builtin_bit_cast(_Float16, h));
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#endif
}

// cvt.rn.f16.f32: float to binary16 bits, round to nearest even, overflow to inf, subnormals kept; a NaN becomes
// a NaN of the hardware's choosing (callers that promise a particular NaN handle NaN first). Every target.
__device__ __forceinline__ unsigned short cvt_rn_f16_f32(float f) {
#if defined(BNB_CUDA_EMULATION)
  return __builtin_bit_cast(unsigned short, static_cast<_Float16>(f));
#else
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#endif
}

// max.u16x2: the unsigned max of each 16-bit half of a and b. One instruction from sm_90 on; earlier targets lack
// it and take two masked 32-bit maxes, which give the same result.
__device__ __forceinline__ unsigned max_u16x2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  return max(a & 0xFFFFu, b & 0xFFFFu) | max(a & 0xFFFF0000u, b & 0xFFFF0000u);
#endif
}

// ld.global.nc.L1::no_allocate.v4.u32: one 16-byte load from global memory that no thread writes during the
// kernel (the non-coherent path), not kept in L1: for data read once. p must be 16-byte aligned. sm_70 and later
// (the L1 eviction hint): every target.
__device__ __forceinline__ void ld_global_nc_no_allocate_v4(const void* p, unsigned (&w)[4]) {
#if defined(BNB_CUDA_EMULATION)
  ::bnb::emu::CheckAligned(p, 16, "ld.global.nc.v4");
  __builtin_memcpy(w, p, 16);
#else
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
      : "l"(p));
#endif
}

// st.global.v4.u32: one 16-byte store to global memory; p must be 16-byte aligned. Every target. The "memory"
// clobber keeps the compiler from moving other memory accesses across it.
__device__ __forceinline__ void st_global_v4(void* p, const unsigned (&w)[4]) {
#if defined(BNB_CUDA_EMULATION)
  ::bnb::emu::CheckAligned(p, 16, "st.global.v4");
  __builtin_memcpy(p, w, 16);
#else
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" : : "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
#endif
}

// dp4a.s32.s32: c + the dot product of a's and b's four signed bytes, exact in int32 (wrapping as int32 adds do).
// sm_61 and later: every target.
__device__ __forceinline__ int dp4a_s32(unsigned a, unsigned b, int c) {
#if defined(BNB_CUDA_EMULATION)
  unsigned sum = static_cast<unsigned>(c);
  for (int i = 0; i < 4; ++i) {
    sum += static_cast<unsigned>(static_cast<int>(static_cast<signed char>(a >> (8 * i))) *
                                 static_cast<int>(static_cast<signed char>(b >> (8 * i))));
  }
  return static_cast<int>(sum);
#else
  int r;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
#endif
}

// prefetch.global.L2: starts bringing the line holding p into L2 without waiting for it. Every target.
__device__ __forceinline__ void prefetch_global_l2(const void* p) {
#if defined(BNB_CUDA_EMULATION)
  (void)p;
#else
  asm volatile("prefetch.global.L2 [%0];" : : "l"(p));
#endif
}

}  // namespace ptx
}  // namespace bnb
