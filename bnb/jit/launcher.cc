#include "bnb/jit/launcher.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace bnb::jit {

std::string DeviceInfo::ArchName() const { return absl::StrCat("sm_", arch); }

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) {
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
                           {kCuDevAttrMultiprocessorCount, &info.sm_count}}) {
    if (absl::Status st = CuCheck(d, d.cuDeviceGetAttribute(out, attr, dev),
                                  absl::StrCat("cuDeviceGetAttribute(", attr, ") on device ", device));
        !st.ok()) {
      return st;
    }
  }
  info.arch = 10 * major + minor;
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
  absl::StatusOr<DeviceInfo> info = GetDeviceInfo(device);  // validates the ordinal
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

namespace {

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

absl::StatusOr<LoadedKernel> LoadKernel(const Binary& binary, int device) {
  absl::StatusOr<CUcontext> ctx = PrimaryContext(device);
  if (!ctx.ok()) return ctx.status();
  const CudaDriver& d = **GetCudaDriver();
  ScopedContext scope(d, *ctx);
  LoadedKernel k;
  k.context = *ctx;
  k.device = device;
  const char* kind = binary.kind == BinaryKind::kCubin ? "CUBIN" : "PTX";
  if (absl::Status st = CuCheck(d, d.cuModuleLoadData(&k.module, binary.image.data()),
                                absl::StrCat("cuModuleLoadData (", kind, ", ", binary.image.size(), " bytes, kernel ",
                                             binary.lowered_name, ") on device ", device));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = CuCheck(d, d.cuModuleGetFunction(&k.function, k.module, binary.lowered_name.c_str()),
                                absl::StrCat("cuModuleGetFunction(", binary.lowered_name, ")"));
      !st.ok()) {
    d.cuModuleUnload(k.module);
    return st;
  }
  return k;
}

absl::StatusOr<int> ResidentCtasPerSm(const LoadedKernel& kernel, int threads) {
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<CUfunction, int>, int>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find({kernel.function, threads}); it != cache->end()) return it->second;
  absl::StatusOr<const CudaDriver*> ds = GetCudaDriver();
  if (!ds.ok()) return ds.status();
  const CudaDriver& d = **ds;
  ScopedContext scope(d, kernel.context);
  int blocks = 0;
  const CUresult r = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel.function, threads, 0);
  if (absl::Status st = CuCheck(d, r, absl::StrCat("cuOccupancyMaxActiveBlocksPerMultiprocessor(block ", threads,
                                                   ") on device ", kernel.device));
      !st.ok()) {
    return st;
  }
  blocks = std::max(blocks, 1);
  (*cache)[{kernel.function, threads}] = blocks;
  return blocks;
}

absl::Status LaunchKernel(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                          void** args) {
  absl::StatusOr<const CudaDriver*> ds = GetCudaDriver();
  if (!ds.ok()) return ds.status();
  const CudaDriver& d = **ds;
  ScopedContext scope(d, kernel.context);
  return CuCheck(d,
                 d.cuLaunchKernel(kernel.function, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes,
                                  static_cast<CUstream>(stream), args, nullptr),
                 absl::StrCat("cuLaunchKernel(grid ", grid.x, "x", grid.y, "x", grid.z, ", block ", block.x, "x",
                              block.y, "x", block.z, ", shared ", shared_bytes, " bytes) on device ", kernel.device));
}

}  // namespace bnb::jit
