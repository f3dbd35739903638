// What the emulated kernel tests share beyond the emulator: include after the kernels' host headers, which declare
// bnb::half and bnb::bf16.
#pragma once

#include <cstdint>
#include <type_traits>

#include "bnb/core/dtype.h"

namespace bnb::emu {

// bnb/core's DType of a kernel element type (float, half, bf16).
template <class T>
constexpr core::DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return core::DType::kFloat32;
  if constexpr (std::is_same_v<T, half>) return core::DType::kFloat16;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bf16>, "element type");
  return core::DType::kBFloat16;
}

// The first of `bytes` bytes at which a and b differ, or -1.
inline int64_t FirstDiff(const void* a, const void* b, int64_t bytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (int64_t i = 0; i < bytes; ++i) {
    if (x[i] != y[i]) return i;
  }
  return -1;
}

}  // namespace bnb::emu
