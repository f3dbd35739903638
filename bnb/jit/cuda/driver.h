// The CUDA driver API, opened at run time with dlopen: bnb does not link libcuda, so one build serves machines
// with and without a GPU. Only the functions bnb uses are declared, with bnb's own types (ABI-compatible with
// cuda.h), so this builds without the CUDA headers.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bnb::jit::cuda {

using CUresult = int;  // CUDA_SUCCESS == 0
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;  // NOLINT: matches cuda.h on 64-bit hosts

// CUdevice_attribute values bnb asks for.
inline constexpr int kCuDevAttrMultiprocessorCount = 16;
inline constexpr int kCuDevAttrComputeCapabilityMajor = 75;
inline constexpr int kCuDevAttrComputeCapabilityMinor = 76;
inline constexpr int kCuDevAttrManagedMemory = 83;
inline constexpr int kCuDevAttrConcurrentManagedAccess = 89;
// CUfunction_attribute
inline constexpr int kCuFuncAttrMaxDynamicSharedSizeBytes = 8;
// cuMemAllocManaged's CU_MEM_ATTACH_GLOBAL; CUmemLocationType's CU_MEM_LOCATION_TYPE_DEVICE and _HOST; the
// CU_DEVICE_CPU that cuMemPrefetchAsync (v1) takes for host memory.
inline constexpr unsigned kCuMemAttachGlobal = 1;
inline constexpr int kCuMemLocationTypeDevice = 1;
inline constexpr int kCuMemLocationTypeHost = 2;
inline constexpr int kCuDeviceCpu = -1;

struct CUmemLocation {
  int type;
  int id;
};

struct CudaDriver {
  std::string path;  // the library that was opened
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* dev, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* value, int attrib, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction fn, int attrib, int value);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared_bytes, CUstream stream, void** params, void** extra);
  CUresult (*cuGetErrorString)(CUresult error, const char** str);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, CUfunction f, int block_size,
                                                          size_t dynamic_shared_bytes);
  // For tests and tools that run a kernel without torch.
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr ptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  // Unified memory (paged optimizer state). The prefetch is cuMemPrefetchAsync_v2 where the driver has it (CUDA
  // 12.2 on), else the older cuMemPrefetchAsync: one of the two is set, or neither (then pages move on demand).
  CUresult (*cuMemAllocManaged)(CUdeviceptr* ptr, size_t bytes, unsigned flags);
  CUresult (*cuMemPrefetchAsyncV2)(CUdeviceptr ptr, size_t bytes, CUmemLocation location, unsigned flags,
                                   CUstream stream);
  CUresult (*cuMemPrefetchAsyncV1)(CUdeviceptr ptr, size_t bytes, CUdevice dst, CUstream stream);
};

// The driver (libcuda.so.1), opened and cuInit'ed once per process. An error names the library looked for and
// how to get it (install the NVIDIA driver; on a machine without a GPU, CUDA ops are unavailable and CPU ops
// keep working). The error is remembered: later calls return it without trying again.
absl::StatusOr<const CudaDriver*> GetCudaDriver();

// "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (200)"-style text for a driver result.
std::string CuErrorText(const CudaDriver& d, CUresult r);
// An error status "<what>: <driver message> (<code>)" unless r == 0.
absl::Status CuCheck(const CudaDriver& d, CUresult r, const std::string& what);

}  // namespace bnb::jit::cuda
