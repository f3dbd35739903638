// Loading compiled kernels into a device's primary context (the one torch uses) and launching them on a stream.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "bnb/jit/cuda_api.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DeviceInfo {
  int device = 0;
  int arch = 0;                 // 10 * major + minor compute capability, e.g. 90
  int sm_count = 0;             // multiprocessors
  std::string ArchName() const;  // "sm_90"
};

// Attributes of CUDA device `device` (an ordinal, as torch numbers them); cached per device.
absl::StatusOr<DeviceInfo> GetDeviceInfo(int device);

// The primary context of `device`, retained once per process (torch uses the same one).
absl::StatusOr<CUcontext> PrimaryContext(int device);

struct LoadedKernel {
  CUfunction function = nullptr;
  CUmodule module = nullptr;
  CUcontext context = nullptr;
  int device = -1;
};

// cuModuleLoadData(binary.image) in the device's primary context, then cuModuleGetFunction(lowered_name).
// The module stays loaded for the life of the process.
absl::StatusOr<LoadedKernel> LoadKernel(const Binary& binary, int device);

// How many CTAs of `threads` threads of `kernel` one multiprocessor holds at once (its registers and static shared
// memory decide; cuOccupancyMaxActiveBlocksPerMultiprocessor), at least 1. Cached per kernel and block size.
absl::StatusOr<int> ResidentCtasPerSm(const LoadedKernel& kernel, int threads);

// cuLaunchKernel on `stream` (a CUstream / cudaStream_t as void*, e.g. c10::Stream::native_handle(); null is the
// legacy default stream). `args` holds one pointer per kernel parameter, pointing at its value. Makes the
// kernel's context current for the call when another one is.
absl::Status LaunchKernel(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                          void** args);

}  // namespace bnb::jit
