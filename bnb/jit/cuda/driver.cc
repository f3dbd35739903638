#include "bnb/jit/cuda/driver.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bnb/jit/cuda/symbols.h"

namespace bnb::jit::cuda {
namespace {

absl::StatusOr<CudaDriver> OpenDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "bnb: the CUDA driver library libcuda.so.1 could not be opened (", err ? err : "not found",
        "). Install the NVIDIA driver (it provides libcuda.so.1) or put its directory on LD_LIBRARY_PATH. "
        "Without it CUDA kernels are unavailable; CPU ops keep working."));
  }
  CudaDriver d{};
  Dl_info info{};
  d.path = "libcuda.so.1";
  std::vector<std::string> missing;
  Sym(lib, "cuInit", &d.cuInit, &missing);
  Sym(lib, "cuDriverGetVersion", &d.cuDriverGetVersion, &missing);
  Sym(lib, "cuDeviceGetCount", &d.cuDeviceGetCount, &missing);
  Sym(lib, "cuDeviceGet", &d.cuDeviceGet, &missing);
  Sym(lib, "cuDeviceGetAttribute", &d.cuDeviceGetAttribute, &missing);
  Sym(lib, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, &missing);
  Sym(lib, "cuCtxGetCurrent", &d.cuCtxGetCurrent, &missing);
  Sym(lib, "cuCtxSetCurrent", &d.cuCtxSetCurrent, &missing);
  Sym(lib, "cuCtxSynchronize", &d.cuCtxSynchronize, &missing);
  Sym(lib, "cuModuleLoadData", &d.cuModuleLoadData, &missing);
  Sym(lib, "cuModuleUnload", &d.cuModuleUnload, &missing);
  Sym(lib, "cuModuleGetFunction", &d.cuModuleGetFunction, &missing);
  Sym(lib, "cuFuncSetAttribute", &d.cuFuncSetAttribute, &missing);
  Sym(lib, "cuLaunchKernel", &d.cuLaunchKernel, &missing);
  Sym(lib, "cuGetErrorString", &d.cuGetErrorString, &missing);
  Sym(lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor", &d.cuOccupancyMaxActiveBlocksPerMultiprocessor, &missing);
  Sym(lib, "cuMemAlloc_v2", &d.cuMemAlloc, &missing);
  Sym(lib, "cuMemFree_v2", &d.cuMemFree, &missing);
  Sym(lib, "cuMemcpyHtoD_v2", &d.cuMemcpyHtoD, &missing);
  Sym(lib, "cuMemcpyDtoH_v2", &d.cuMemcpyDtoH, &missing);
  // Unified memory is optional (paged state falls back to device memory without it); either prefetch will do.
  std::vector<std::string> optional;
  Sym(lib, "cuMemAllocManaged", &d.cuMemAllocManaged, &optional);
  Sym(lib, "cuMemPrefetchAsync_v2", &d.cuMemPrefetchAsyncV2, &optional);
  if (d.cuMemPrefetchAsyncV2 == nullptr) Sym(lib, "cuMemPrefetchAsync", &d.cuMemPrefetchAsyncV1, &optional);
  if (dladdr(reinterpret_cast<void*>(d.cuInit), &info) != 0 && info.dli_fname) d.path = info.dli_fname;
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("bnb: the CUDA driver ", d.path, " lacks ",
                                                      absl::StrJoin(missing, ", "),
                                                      "; update the NVIDIA driver"));
  }
  const CUresult r = d.cuInit(0);
  if (r != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("bnb: cuInit(0) failed with ", CuErrorText(d, r), " (driver ", d.path,
                     "): no usable GPU, or the driver is older than the toolkit; CPU ops keep working"));
  }
  return d;
}

}  // namespace

absl::StatusOr<const CudaDriver*> GetCudaDriver() {
  static const absl::StatusOr<CudaDriver>* const driver = new absl::StatusOr<CudaDriver>(OpenDriver());
  if (!driver->ok()) return driver->status();
  return &**driver;
}

std::string CuErrorText(const CudaDriver& d, CUresult r) {
  const char* s = nullptr;
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &s) != 0 || s == nullptr) s = "unknown CUDA error";
  return absl::StrCat(s, " (", r, ")");
}

absl::Status CuCheck(const CudaDriver& d, CUresult r, const std::string& what) {
  if (r == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", CuErrorText(d, r)));
}

}  // namespace bnb::jit::cuda
