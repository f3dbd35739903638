#include "bnb/core/dtype.h"

namespace bnb::core {

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp != 0) return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsToFloat(sign);
  // Subnormal half: value = mant * 2^-24, exactly representable as a normal float.
  int e = 113;
  while ((mant & 0x400) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsToFloat(sign | (uint32_t(e) << 23) | ((mant & 0x3FF) << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t b = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00;  // NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds to or beyond 65520: inf
  const int exp = int(abs >> 23) - 127;
  if (exp >= -14) {  // normal half
    uint32_t m = abs & 0x7FFFFF;
    uint32_t h = (uint32_t(exp + 15) << 10) | (m >> 13);
    const uint32_t rest = m & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carries into the exponent correctly
    return sign | static_cast<uint16_t>(h);
  }
  if (exp < -25) return sign;  // below half the smallest subnormal: rounds to zero
  // Subnormal half: shift the full significand (with its implicit bit) right, rounding to nearest even.
  const uint32_t m = (abs & 0x7FFFFF) | 0x800000;
  const int shift = -exp - 14 + 13;  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

}  // namespace bnb::core
