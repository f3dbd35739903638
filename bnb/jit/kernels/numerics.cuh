// Exact float helpers shared by the kernels' numerics headers (codebook4.cuh, codebook8.cuh), in a header that also
// compiles as plain host C++ (no CUDA headers, no standard headers under NVRTC), so host tests check the very
// functions the GPU runs (bnb/jit/BUILD.bazel copies it for host builds as numerics_host.h).
#pragma once

#if defined(__CUDACC__)
#define BNB_HD __host__ __device__ __forceinline__
#define BNB_CONSTEXPR_HD __host__ __device__ constexpr
#else
#include <cmath>
#define BNB_HD inline
#define BNB_CONSTEXPR_HD constexpr
#endif

namespace bnb {

// Bit casts usable in constant expressions (GCC >= 11, Clang, NVRTC).
BNB_CONSTEXPR_HD unsigned FloatBits(float f) { return __builtin_bit_cast(unsigned, f); }
BNB_CONSTEXPR_HD float BitsFloat(unsigned u) { return __builtin_bit_cast(float, u); }
// Single roundings, never contracted into one another (NVRTC fuses a * b + c unless told otherwise).
BNB_HD float MulRn(float a, float b) {
#if defined(__CUDACC__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BNB_HD float FmaRn(float a, float b, float c) {
#if defined(__CUDACC__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// ---- Division: x / a as bnb::core::ScaleToUnit computes it, without a division per element. ----
// Blocks whose absmax a lies in [2^-60, 2^60] may take ScaleFast: 1/a is then a normal float, and for every x in
// [-a, a] with |x / a| >= 2^-20 the operands, residuals and quotient stay far from underflow, which is what
// Markstein's theorem needs for the last step to round correctly. Smaller quotients may come out an ulp off (the
// callers either do not depend on them or redo them exactly). Other blocks (0, inf, NaN, extreme absmax) divide
// exactly with __fdiv_rn.
BNB_HD bool FastScaleOk(float a) { return a >= 0x1p-60f && a <= 0x1p60f; }

// y = 1/a correctly rounded (computed once per block). q0 within a few ulps, q1 within an ulp of x / a; the
// final correction q2 = RN(q1 + r1 * y), r1 = x - a * q1 exactly (one fma), is RN(x / a).
BNB_HD float ScaleFast(float x, float a, float y) {
  const float q0 = MulRn(x, y);
  const float r0 = FmaRn(-a, q0, x);
  const float q1 = FmaRn(r0, y, q0);
  const float r1 = FmaRn(-a, q1, x);
  return FmaRn(r1, y, q1);
}

// ---- Nearest-value splits. ----
// The largest float t such that every float v <= t is at least as near lo as hi (lo <= hi, finite), so v takes hi
// exactly when v > t: m = (lo + hi) * 0.5f, or the float just below it where that rounding lands above the true
// midpoint. Twin of bnb::core::SplitPoint (codebook.h; a host test keeps them equal). Exact: Knuth's TwoSum gives
// lo + hi == s + err, and (m - s) + m is 2m - s exactly (m is s halved, rounded only among subnormals). m comes
// in computed, because device code must compute it by __fmul_rn: a multiply contracted into (m - s)'s fma would
// hide the subnormal rounding.
BNB_CONSTEXPR_HD float SplitPointOf(float lo, float hi, float m) {
  const float s = lo + hi;
  if (!(s - s == 0.0f)) return m;  // lo + hi overflowed
  const float hi_part = s - lo;
  const float err = (lo - (s - hi_part)) + (hi - hi_part);
  if (!((m - s) + m > err)) return m;
  const unsigned b = FloatBits(m);
  return m > 0.0f ? BitsFloat(b - 1u) : (m < 0.0f ? BitsFloat(b + 1u) : BitsFloat(0x80000001u));
}

// SplitPoint for constant expressions and host code, which round each step on its own.
BNB_CONSTEXPR_HD float SplitPoint(float lo, float hi) { return SplitPointOf(lo, hi, (lo + hi) * 0.5f); }

}  // namespace bnb
