// The cpu.* knobs as the CPU kernels use them.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace bnb::core {

struct CpuSettings {
  int64_t threads;         // 0: the caller's thread pool decides
  int64_t grain_elements;  // fewest elements per parallel task
  bool gemv_bf16_products;  // cpu.gemv_bf16_products (gemv4.h)
};

// Reads the knobs, and applies cpu.isa's cap to kernel dispatch whenever the configuration changed since the
// last call. Fails when the configuration cannot be read (a bad config file, say), with that error.
absl::StatusOr<CpuSettings> CurrentCpuSettings();

}  // namespace bnb::core
