#include "bnb/jit/fake_runtime.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace bnb::jit {

absl::Status FakeRuntime::CheckDevice(int device) const {
  if (device >= 0 && device < devices) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("fake device ", device, " does not exist (", devices, " devices)"));
}

absl::StatusOr<DeviceInfo> FakeRuntime::GetDeviceInfo(int device) {
  if (absl::Status st = CheckDevice(device); !st.ok()) return st;
  DeviceInfo info;
  info.device = device;
  info.target = target;
  info.multiprocessors = multiprocessors;
  return info;
}

absl::StatusOr<uintptr_t> FakeRuntime::AllocManaged(int device, size_t bytes) {
  if (absl::Status st = CheckDevice(device); !st.ok()) return st;
  if (bytes == 0) return absl::InvalidArgumentError("fake runtime: a managed allocation of 0 bytes");
  std::lock_guard<std::mutex> lock(mu_);
  managed_.push_back(std::make_unique<char[]>(bytes));
  return reinterpret_cast<uintptr_t>(managed_.back().get());
}

absl::Status FakeRuntime::FreeManaged(int device, uintptr_t address) {
  if (absl::Status st = CheckDevice(device); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = managed_.begin(); it != managed_.end(); ++it) {
    if (reinterpret_cast<uintptr_t>(it->get()) == address) {
      managed_.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("fake runtime: ", address, " is no managed allocation"));
}

absl::Status FakeRuntime::PrefetchManaged(int device, uintptr_t address, size_t bytes, void* stream,
                                          bool to_host) {
  if (absl::Status st = CheckDevice(device); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  prefetches_.push_back({address, bytes, device, stream, to_host});
  return absl::OkStatus();
}

std::vector<FakeRuntime::Prefetched> FakeRuntime::prefetches() {
  std::lock_guard<std::mutex> lock(mu_);
  return prefetches_;
}

size_t FakeRuntime::managed_allocations() {
  std::lock_guard<std::mutex> lock(mu_);
  return managed_.size();
}

absl::StatusOr<RuntimeModule*> FakeRuntime::LoadModule(absl::string_view image, int device) {
  if (absl::Status st = CheckDevice(device); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  modules_.push_back(std::make_unique<Module>(Module{std::string(image), device}));
  return reinterpret_cast<RuntimeModule*>(modules_.back().get());
}

void FakeRuntime::UnloadModule(RuntimeModule* module, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.erase(std::remove_if(modules_.begin(), modules_.end(),
                                [&](const auto& m) { return reinterpret_cast<RuntimeModule*>(m.get()) == module; }),
                 modules_.end());
}

absl::StatusOr<RuntimeFunction*> FakeRuntime::GetFunction(RuntimeModule* module, int device,
                                                          const std::string& name) {
  if (name.empty()) return absl::NotFoundError("fake GetFunction: no function has an empty name");
  std::lock_guard<std::mutex> lock(mu_);
  functions_.push_back(std::make_unique<Function>(Function{reinterpret_cast<Module*>(module), name}));
  return reinterpret_cast<RuntimeFunction*>(functions_.back().get());
}

absl::StatusOr<int> FakeRuntime::ResidentCtasPerSm(const LoadedKernel&, int) { return resident_ctas_per_sm; }

absl::Status FakeRuntime::Launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes,
                                 void* stream, const KernelArgs& args) {
  const auto* f = reinterpret_cast<const Function*>(kernel.function);
  Launched l;
  l.image = f->module->image;
  l.function = f->name;
  l.device = kernel.device;
  l.grid = grid;
  l.block = block;
  l.shared_bytes = shared_bytes;
  l.stream = stream;
  for (size_t i = 0; i < args.count; ++i) {
    l.arg_addresses.push_back(args.values[i]);
    l.arg_bytes.emplace_back(static_cast<const char*>(args.values[i]), args.sizes[i]);
  }
  std::lock_guard<std::mutex> lock(mu_);
  launches_.push_back(std::move(l));
  return absl::OkStatus();
}

std::vector<FakeRuntime::Launched> FakeRuntime::launches() {
  std::lock_guard<std::mutex> lock(mu_);
  return launches_;
}

int FakeRuntime::modules_loaded() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(modules_.size());
}

}  // namespace bnb::jit
