// The CUDA runtime behind bnb/jit's GPU-runtime seam (runtime.h), on the driver API (driver.h): modules load into
// a device's primary context (the one torch uses), launches go to the stream the caller names.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bnb/jit/cuda/driver.h"
#include "bnb/jit/runtime.h"

namespace bnb::jit::cuda {

class CudaRuntime : public Runtime {
 public:
  const char* Name() const override { return "CUDA"; }
  // Target "sm_XX" from the compute capability; cached per device.
  absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) override;
  // cuModuleLoadData in the device's primary context.
  absl::StatusOr<RuntimeModule*> LoadModule(absl::string_view image, int device) override;
  void UnloadModule(RuntimeModule* module, int device) override;
  absl::StatusOr<RuntimeFunction*> GetFunction(RuntimeModule* module, int device, const std::string& name) override;
  // cuOccupancyMaxActiveBlocksPerMultiprocessor; cached per kernel and block size.
  absl::StatusOr<int> ResidentCtasPerSm(const LoadedKernel& kernel, int threads) override;
  // cuLaunchKernel, with the kernel's context made current for the call when another one is.
  absl::Status Launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                      const KernelArgs& args) override;
  // cuMemAllocManaged (attached globally) in the device's primary context, where the device reports managed
  // memory and concurrent managed access (without the latter, the host could not touch it while kernels run).
  absl::StatusOr<uintptr_t> AllocManaged(int device, size_t bytes) override;
  // cuCtxSynchronize, then cuMemFree.
  absl::Status FreeManaged(int device, uintptr_t address) override;
  // cuMemPrefetchAsync(_v2) to the device or to host memory.
  absl::Status PrefetchManaged(int device, uintptr_t address, size_t bytes, void* stream,
                               bool to_host) override;
};

// The process's CudaRuntime (its caches are per process, as the driver's state is).
CudaRuntime& GetCudaRuntime();

// The primary context of `device`, retained once per process (torch uses the same one).
absl::StatusOr<CUcontext> PrimaryContext(int device);

}  // namespace bnb::jit::cuda
