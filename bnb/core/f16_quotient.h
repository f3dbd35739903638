// x / a for float16 x and a without a division (the blockwise quantizers' scaling, x / absmax): vdivps issues
// about every 10 cycles on Intel's cores, where a product and two fused multiply-adds issue in ~1.5.
//
// With y = 1 / a rounded to float32, q0 = x * y rounded, and the residual x - q0 * a (exact in one fused
// multiply-add), q0 + residual * y rounded is x / a rounded (Markstein's correction), and the sign of x put back
// (a zero x's residual is +0, which drops a -0's sign). For float16 x and a (widened to float32, |x| <= a, a > 0)
// this equals the quotient bit for bit for every pair: core_f16_quotient_test checks all ~5e8 pairs with x >= 0, and
// the steps are odd in x. Outside float16 (under- or overflow of y or of the residual) it is not claimed.
#pragma once

#include <cmath>

namespace bnb::core {

// x / a as described above; y must be 1.0f / a.
inline float F16Quotient(float x, float a, float y) {
  const float q0 = x * y;
  const float q = std::fma(std::fma(-q0, a, x), y, q0);
  return std::copysign(q, x);
}

}  // namespace bnb::core
