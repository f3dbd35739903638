// x / a without a division, for the kernels that divide many values by one (the blockwise quantizers' x / absmax,
// the 8-bit optimizers' bias corrections): vdivps issues about every 10 cycles on Intel's cores (vsqrtps every ~12,
// on the same divider), where a product and two fused multiply-adds issue in ~1.5.
//
// With y = 1 / a rounded to float32, q0 = x * y rounded and the residual x - q0 * a (exact in one fused
// multiply-add), q0 + residual * y rounded is x / a rounded (Markstein's correction; with 1 / a computed in advance,
// a product and two fused multiply-adds give the correctly rounded quotient: Muller, Brisebarre and Raina, IEEE
// Trans. Computers 53(8), 2004), as long as x, the quotient and the residual stay normal numbers; the sign of x is
// put back (a zero x's residual is +0, which drops a -0's sign).
// - float16 x and a (widened; |x| <= a, a > 0): exact for every pair with no further check (core_quotient_test
//   runs all ~5e8 pairs with x >= 0; the steps are odd in x).
// - any float32 x and a: exact where QuotientTakesDivision says no; the lanes it names take the true division.
#pragma once

#include <cmath>

namespace bnb::core {

// x / a as described above; y must be 1.0f / a.
inline float QuotientByProducts(float x, float a, float y) {
  const float q0 = x * y;
  const float q = std::fma(std::fma(-q0, a, x), y, q0);
  return std::copysign(q, x);
}

// Outside [kQuotientTiny, kQuotientHuge], 1 / a, a nonzero x or its first product q0 = x * y may leave the normal
// range (y subnormal, the residual or the quotient below it).
inline constexpr float kQuotientTiny = 0x1p-100f, kQuotientHuge = 0x1p+100f;

// Whether the products' q (QuotientByProducts) with first product q0 = x * y is not claimed for float32 x and a:
// a outside [kQuotientTiny, kQuotientHuge] (0, infinite, NaN and subnormal included), q not finite (x infinite or
// NaN), or x nonzero with |x| or |q0| below kQuotientTiny.
inline bool QuotientTakesDivision(float x, float a, float q0, float q) {
  return !(a >= kQuotientTiny && a <= kQuotientHuge) || !std::isfinite(q) ||
         (x != 0.0f && std::fmin(std::fabs(x), std::fabs(q0)) < kQuotientTiny);
}

}  // namespace bnb::core
