// The CUDA driver API and NVRTC, opened at run time with dlopen: bnb links neither, so one build serves machines
// with and without a GPU. Only the functions bnb uses are declared, with bnb's own types (ABI-compatible with
// cuda.h / nvrtc.h), so this builds without the CUDA headers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bnb::jit {

using CUresult = int;  // CUDA_SUCCESS == 0
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;  // NOLINT: matches cuda.h on 64-bit hosts
using nvrtcResult = int;                 // NVRTC_SUCCESS == 0
using nvrtcProgram = struct _nvrtcProgram*;

// CUdevice_attribute values bnb asks for.
inline constexpr int kCuDevAttrMultiprocessorCount = 16;
inline constexpr int kCuDevAttrComputeCapabilityMajor = 75;
inline constexpr int kCuDevAttrComputeCapabilityMinor = 76;
// CUfunction_attribute
inline constexpr int kCuFuncAttrMaxDynamicSharedSizeBytes = 8;

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
};

struct Nvrtc {
  std::string path;  // the library that was opened
  int major = 0, minor = 0;
  // The size of the file at `path` (-1 when it cannot be read): nvrtcVersion gives only major.minor, and a patch
  // release (13.0.48 -> 13.0.88) can change the code generated; its file size changes with it.
  int64_t library_bytes = -1;
  std::vector<int> supported_archs;  // e.g. {75, 80, 86, ..., 90, 100, 120}, ascending
  nvrtcResult (*nvrtcVersion)(int* major, int* minor);
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int* n);
  nvrtcResult (*nvrtcGetSupportedArchs)(int* archs);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                                    const char* const* headers, const char* const* include_names);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram* prog);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options, const char* const* options);
  nvrtcResult (*nvrtcAddNameExpression)(nvrtcProgram prog, const char* name_expression);
  nvrtcResult (*nvrtcGetLoweredName)(nvrtcProgram prog, const char* name_expression, const char** lowered);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char* cubin);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram prog, char* ptx);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t* size);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char* log);
  const char* (*nvrtcGetErrorString)(nvrtcResult result);
};

// The driver (libcuda.so.1), opened and cuInit'ed once per process. An error names the library looked for and
// how to get it (install the NVIDIA driver; on a machine without a GPU, CUDA ops are unavailable and CPU ops
// keep working). The error is remembered: later calls return it without trying again.
absl::StatusOr<const CudaDriver*> GetCudaDriver();

// A library file GetNvrtc tries right after the cuda.nvrtc_path knob's (so any config layer that sets the knob
// wins): the Python package passes the nvidia-cuda-nvrtc wheel's copy. Takes effect if NVRTC is not open yet.
void SetFallbackNvrtcPath(const std::string& path);

// NVRTC, opened once per process. Looks for, in order: the file the cuda.nvrtc_path knob names (env
// BNB_CUDA_NVRTC_PATH, or any config layer), SetFallbackNvrtcPath's; libnvrtc.so.13 and
// then libnvrtc.so.12 through the dynamic loader (LD_LIBRARY_PATH, an already-loaded copy such as torch's), then
// under $CUDA_HOME/lib64, $CUDA_HOME/lib and /usr/local/cuda/lib64. NVRTC's companion libnvrtc-builtins is
// preloaded from the same directory, so a copy outside the loader's path works. An error lists every place tried.
absl::StatusOr<const Nvrtc*> GetNvrtc();

// "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (200)"-style text for a driver result.
std::string CuErrorText(const CudaDriver& d, CUresult r);
// An error status "<what>: <driver message> (<code>)" unless r == 0.
absl::Status CuCheck(const CudaDriver& d, CUresult r, const std::string& what);

}  // namespace bnb::jit
