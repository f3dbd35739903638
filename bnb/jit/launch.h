// Typed kernel launches: Launch(kernel, grid, block, shared_bytes, stream, a, b, c) passes a, b and c as the
// kernel's parameters, in order, building the driver's array of pointers to them here rather than at each call.
//
// The runtime copies each parameter's bytes from the argument as the kernel declares the parameter, so each
// argument must have the size of its parameter: any pointer for a pointer, `long long` for the kernels' 64-bit
// counts (static_cast an int64_t or size_t count at the call), `int` for an int.
#pragma once

#include <cstddef>
#include <type_traits>

#include "absl/status/status.h"
#include "bnb/jit/runtime.h"

namespace bnb::jit {

// Launches kernel.runtime's kernel with `args`; fails when `kernel` was never loaded.
absl::Status LaunchPacked(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                          const KernelArgs& args);

template <class... Args>
absl::Status Launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                    const Args&... args) {
  static_assert((std::is_trivially_copyable_v<Args> && ...), "kernel arguments are copied byte for byte");
  static_assert(((!std::is_array_v<Args>) && ...), "pass an array's pointer: a kernel takes no arrays by value");
  // The arguments live until the call returns, and the runtime copies their values during it. One spare entry
  // keeps the arrays non-empty for a kernel without parameters.
  void* values[] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  const size_t sizes[] = {sizeof(Args)..., 0};
  return LaunchPacked(kernel, grid, block, shared_bytes, stream, KernelArgs{values, sizes, sizeof...(Args)});
}

}  // namespace bnb::jit
