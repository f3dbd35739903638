// What every CUDA kernel of bnb/ops needs from torch: the device's index, and torch's current stream on it, so
// launches order with the user's other work.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "bnb/core/dtype.h"

namespace bnb::ops {

// torch's current stream for t's CUDA device, as a CUstream.
void* CurrentCudaStream(const at::Tensor& t);

// Raises with the op's name when a launch failed (no driver, NVRTC missing, compile error, ...).
void ThrowIfLaunchFailed(const char* op, const absl::Status& st);

// cuda.threads_per_block (0: the kernels' default).
int CudaThreadsPerBlock(const char* op);

// cuda.optim8_per_thread.
int CudaOptim8PerThread(const char* op);

}  // namespace bnb::ops
