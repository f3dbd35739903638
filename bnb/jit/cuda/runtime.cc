#include "bnb/jit/cuda/runtime.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bnb/jit/cuda/arch.h"

namespace bnb::jit::cuda {
namespace {

// What a RuntimeModule* points at: the module and the context it lives in, which launches make current.
struct Module {
  CUmodule module = nullptr;
  CUcontext context = nullptr;
};

Module* AsModule(RuntimeModule* m) { return reinterpret_cast<Module*>(m); }
CUfunction AsFunction(RuntimeFunction* f) { return reinterpret_cast<CUfunction>(f); }

// Makes `ctx` current for its lifetime when it is not already, then restores the previous one.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver& d, CUcontext ctx) : d_(d) {
    if (d_.cuCtxGetCurrent(&prev_) == 0 && prev_ != ctx && d_.cuCtxSetCurrent(ctx) == 0) switched_ = true;
  }
  ~ScopedContext() {
    if (switched_) d_.cuCtxSetCurrent(prev_);
  }

 private:
  const CudaDriver& d_;
  CUcontext prev_ = nullptr;
  bool switched_ = false;
};

}  // namespace

absl::StatusOr<DeviceInfo> CudaRuntime::GetDeviceInfo(int device) {
  static std::mutex mu;
  static std::map<int, DeviceInfo>* cache = new std::map<int, DeviceInfo>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(device); it != cache->end()) return it->second;
  absl::StatusOr<const CudaDriver*> ds = GetCudaDriver();
  if (!ds.ok()) return ds.status();
  const CudaDriver& d = **ds;
  int count = 0;
  if (absl::Status st = CuCheck(d, d.cuDeviceGetCount(&count), "cuDeviceGetCount"); !st.ok()) return st;
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist: expected 0..", count - 1, " (", count, " devices)"));
  }
  CUdevice dev = 0;
  if (absl::Status st = CuCheck(d, d.cuDeviceGet(&dev, device), "cuDeviceGet"); !st.ok()) return st;
  DeviceInfo info;
  info.device = device;
  int major = 0, minor = 0;
  for (auto [attr, out] : {std::pair<int, int*>{kCuDevAttrComputeCapabilityMajor, &major},
                           {kCuDevAttrComputeCapabilityMinor, &minor},
                           {kCuDevAttrMultiprocessorCount, &info.multiprocessors}}) {
    if (absl::Status st = CuCheck(d, d.cuDeviceGetAttribute(out, attr, dev),
                                  absl::StrCat("cuDeviceGetAttribute(", attr, ") on device ", device));
        !st.ok()) {
      return st;
    }
  }
  info.target = ArchName(10 * major + minor);
  (*cache)[device] = info;
  return info;
}

absl::StatusOr<CUcontext> PrimaryContext(int device) {
  static std::mutex mu;
  static std::map<int, CUcontext>* cache = new std::map<int, CUcontext>;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache->find(device); it != cache->end()) return it->second;
  }
  absl::StatusOr<DeviceInfo> info = GetCudaRuntime().GetDeviceInfo(device);  // validates the ordinal
  if (!info.ok()) return info.status();
  const CudaDriver& d = **GetCudaDriver();
  CUdevice dev = 0;
  if (absl::Status st = CuCheck(d, d.cuDeviceGet(&dev, device), "cuDeviceGet"); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(device); it != cache->end()) return it->second;
  CUcontext ctx = nullptr;
  if (absl::Status st = CuCheck(d, d.cuDevicePrimaryCtxRetain(&ctx, dev),
                                absl::StrCat("cuDevicePrimaryCtxRetain on device ", device));
      !st.ok()) {
    return st;
  }
  (*cache)[device] = ctx;
  return ctx;
}

absl::StatusOr<RuntimeModule*> CudaRuntime::LoadModule(absl::string_view image, int device) {
  absl::StatusOr<CUcontext> ctx = PrimaryContext(device);
  if (!ctx.ok()) return ctx.status();
  const CudaDriver& d = **GetCudaDriver();
  ScopedContext scope(d, *ctx);
  auto* m = new Module;
  m->context = *ctx;
  // image.data() is a Binary's std::string: a PTX image keeps the terminating NUL the driver reads up to.
  if (absl::Status st = CuCheck(d, d.cuModuleLoadData(&m->module, image.data()), "cuModuleLoadData"); !st.ok()) {
    delete m;
    return st;
  }
  return reinterpret_cast<RuntimeModule*>(m);
}

void CudaRuntime::UnloadModule(RuntimeModule* module, int device) {
  Module* m = AsModule(module);
  const CudaDriver& d = **GetCudaDriver();  // a module was loaded: the driver is open
  ScopedContext scope(d, m->context);
  d.cuModuleUnload(m->module);
  delete m;
}

absl::StatusOr<RuntimeFunction*> CudaRuntime::GetFunction(RuntimeModule* module, int device,
                                                          const std::string& name) {
  const CudaDriver& d = **GetCudaDriver();
  CUfunction f = nullptr;
  if (absl::Status st = CuCheck(d, d.cuModuleGetFunction(&f, AsModule(module)->module, name.c_str()),
                                absl::StrCat("cuModuleGetFunction(", name, ")"));
      !st.ok()) {
    return st;
  }
  return reinterpret_cast<RuntimeFunction*>(f);
}

absl::StatusOr<int> CudaRuntime::ResidentCtasPerSm(const LoadedKernel& kernel, int threads) {
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<RuntimeFunction*, int>, int>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find({kernel.function, threads}); it != cache->end()) return it->second;
  absl::StatusOr<const CudaDriver*> ds = GetCudaDriver();
  if (!ds.ok()) return ds.status();
  const CudaDriver& d = **ds;
  ScopedContext scope(d, AsModule(kernel.module)->context);
  int blocks = 0;
  const CUresult r = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, AsFunction(kernel.function), threads, 0);
  if (absl::Status st = CuCheck(d, r, absl::StrCat("cuOccupancyMaxActiveBlocksPerMultiprocessor(block ", threads,
                                                   ") on device ", kernel.device));
      !st.ok()) {
    return st;
  }
  blocks = std::max(blocks, 1);
  (*cache)[{kernel.function, threads}] = blocks;
  return blocks;
}

absl::Status CudaRuntime::Launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes,
                                 void* stream, const KernelArgs& args) {
  absl::StatusOr<const CudaDriver*> ds = GetCudaDriver();
  if (!ds.ok()) return ds.status();
  const CudaDriver& d = **ds;
  ScopedContext scope(d, AsModule(kernel.module)->context);
  // The driver reads each parameter's size from the kernel itself; args.sizes serve runtimes and tests that
  // copy the values.
  return CuCheck(d,
                 d.cuLaunchKernel(AsFunction(kernel.function), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                  shared_bytes, static_cast<CUstream>(stream), args.values, nullptr),
                 absl::StrCat("cuLaunchKernel(grid ", grid.x, "x", grid.y, "x", grid.z, ", block ", block.x, "x",
                              block.y, "x", block.z, ", shared ", shared_bytes, " bytes) on device ", kernel.device));
}

absl::StatusOr<uintptr_t> CudaRuntime::AllocManaged(int device, size_t bytes) {
  absl::StatusOr<CUcontext> ctx = PrimaryContext(device);  // opens the driver and validates the ordinal
  if (!ctx.ok()) return ctx.status();
  const CudaDriver& d = **GetCudaDriver();
  if (d.cuMemAllocManaged == nullptr) {
    return absl::UnimplementedError(absl::StrCat("the CUDA driver ", d.path, " has no cuMemAllocManaged"));
  }
  CUdevice dev = 0;
  if (absl::Status st = CuCheck(d, d.cuDeviceGet(&dev, device), "cuDeviceGet"); !st.ok()) return st;
  for (int attr : {kCuDevAttrManagedMemory, kCuDevAttrConcurrentManagedAccess}) {
    int value = 0;
    if (absl::Status st = CuCheck(d, d.cuDeviceGetAttribute(&value, attr, dev),
                                  absl::StrCat("cuDeviceGetAttribute(", attr, ") on device ", device));
        !st.ok()) {
      return st;
    }
    if (value == 0) {
      return absl::UnimplementedError(absl::StrCat("CUDA device ", device, " has no ",
                                                   attr == kCuDevAttrManagedMemory ? "managed memory"
                                                                                   : "concurrent managed access"));
    }
  }
  ScopedContext scope(d, *ctx);
  CUdeviceptr p = 0;
  if (absl::Status st = CuCheck(d, d.cuMemAllocManaged(&p, bytes, kCuMemAttachGlobal),
                                absl::StrCat("cuMemAllocManaged(", bytes, " bytes) for device ", device));
      !st.ok()) {
    return st;
  }
  return static_cast<uintptr_t>(p);
}

absl::Status CudaRuntime::FreeManaged(int device, uintptr_t address) {
  absl::StatusOr<CUcontext> ctx = PrimaryContext(device);
  if (!ctx.ok()) return ctx.status();
  const CudaDriver& d = **GetCudaDriver();
  ScopedContext scope(d, *ctx);
  // The last tensor on the memory may go while kernels that read it are still queued.
  if (absl::Status st = CuCheck(d, d.cuCtxSynchronize(), "cuCtxSynchronize"); !st.ok()) return st;
  return CuCheck(d, d.cuMemFree(static_cast<CUdeviceptr>(address)), "cuMemFree (managed)");
}

absl::Status CudaRuntime::PrefetchManaged(int device, uintptr_t address, size_t bytes, void* stream,
                                          bool to_host) {
  absl::StatusOr<CUcontext> ctx = PrimaryContext(device);
  if (!ctx.ok()) return ctx.status();
  const CudaDriver& d = **GetCudaDriver();
  ScopedContext scope(d, *ctx);
  const auto ptr = static_cast<CUdeviceptr>(address);
  const auto s = static_cast<CUstream>(stream);
  const std::string where = to_host ? "host memory" : absl::StrCat("device ", device);
  if (d.cuMemPrefetchAsyncV2 != nullptr) {
    const CUmemLocation to = to_host ? CUmemLocation{kCuMemLocationTypeHost, 0}
                                     : CUmemLocation{kCuMemLocationTypeDevice, device};
    return CuCheck(d, d.cuMemPrefetchAsyncV2(ptr, bytes, to, 0, s),
                   absl::StrCat("cuMemPrefetchAsync_v2(", bytes, " bytes) to ", where));
  }
  if (d.cuMemPrefetchAsyncV1 != nullptr) {
    CUdevice dev = kCuDeviceCpu;
    if (!to_host) {
      if (absl::Status st = CuCheck(d, d.cuDeviceGet(&dev, device), "cuDeviceGet"); !st.ok()) return st;
    }
    return CuCheck(d, d.cuMemPrefetchAsyncV1(ptr, bytes, dev, s),
                   absl::StrCat("cuMemPrefetchAsync(", bytes, " bytes) to ", where));
  }
  return absl::OkStatus();
}

CudaRuntime& GetCudaRuntime() {
  static CudaRuntime* const runtime = new CudaRuntime;
  return *runtime;
}

}  // namespace bnb::jit::cuda
