// Threads per CUDA block of the blockwise kernels: the cuda.threads_per_block knob, resolved in one place. The ops
// pass the knob's raw value (0 included) to the launch functions, which resolve it here, so a spec, its grid and its
// launch always agree and 0 and the default it stands for build the same kernel (one cache key).
#pragma once

#include "absl/status/status.h"

namespace bnb::jit {

// The threads a blockwise family launches with for the knob's value: 0 picks core::kCudaThreadsPerBlockDefault
// (bnb/core/knobs.h, which the knob's doc quotes); any other value is taken as it is.
int ThreadsPerBlock(int knob_value);

// OK for a power of two in [32, 1024]; otherwise an error naming `what` kernel and the value.
absl::Status CheckThreadsPerBlock(const char* what, int threads);

}  // namespace bnb::jit
