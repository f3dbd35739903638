// Element types the core kernels read and write, and exact scalar conversions between them and float.
#pragma once

#include <cstdint>
#include <cstring>
#include "absl/strings/string_view.h"

namespace bnb::core {

enum class DType { kFloat32, kFloat16, kBFloat16 };

absl::string_view DTypeName(DType t);
constexpr int DTypeSize(DType t) { return t == DType::kFloat32 ? 4 : 2; }

inline float BitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// bfloat16 is the top half of a float: widening is exact.
inline float BF16ToFloat(uint16_t h) { return BitsToFloat(uint32_t{h} << 16); }

// Round to nearest, ties to even; NaN becomes the quiet NaN 0x7FC0 (torch's c10::BFloat16 does the same).
inline uint16_t FloatToBF16(float f) {
  uint32_t b = FloatToBits(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// IEEE binary16 <-> binary32, exact widening and round-to-nearest-even narrowing, subnormals included.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// Element i of a T buffer at `base`, which need not be aligned to T (a view may start at any byte): memcpy, which
// compiles to a plain load or store.
template <class T>
inline T LoadElement(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
template <class T>
inline void StoreElement(void* base, int64_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

// Element i of a buffer of `dtype`, widened to float; and the reverse, rounding to nearest even.
inline float LoadAsFloat(DType dtype, const void* x, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return LoadElement<float>(x, i);
    case DType::kFloat16: return HalfToFloat(LoadElement<uint16_t>(x, i));
    case DType::kBFloat16: return BF16ToFloat(LoadElement<uint16_t>(x, i));
  }
  return 0.0f;
}

inline void StoreFromFloat(DType dtype, void* out, int64_t i, float v) {
  switch (dtype) {
    case DType::kFloat32: StoreElement<float>(out, i, v); break;
    case DType::kFloat16: StoreElement<uint16_t>(out, i, FloatToHalf(v)); break;
    case DType::kBFloat16: StoreElement<uint16_t>(out, i, FloatToBF16(v)); break;
  }
}

}  // namespace bnb::core
