// A Runtime for tests: pretend devices that load any image, and record every launch with a copy of each
// argument's bytes, so host code's launches (shapes, argument packing) are checked without a GPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bnb/jit/runtime.h"

namespace bnb::jit {

class FakeRuntime : public Runtime {
 public:
  struct Launched {
    std::string image;     // the module's image: FakeCompiler's names the spec
    std::string function;  // the name GetFunction was given
    int device = -1;
    Dim3 grid, block;
    unsigned shared_bytes = 0;
    void* stream = nullptr;
    std::vector<const void*> arg_addresses;  // KernelArgs::values as handed over
    std::vector<std::string> arg_bytes;      // each argument's bytes, copied during the launch

    // Argument i read back as T; T must have the argument's size (a test failure otherwise: returns T{}).
    template <class T>
    T Arg(size_t i) const {
      T v{};
      if (i < arg_bytes.size() && arg_bytes[i].size() == sizeof(T)) std::memcpy(&v, arg_bytes[i].data(), sizeof(T));
      return v;
    }
  };

  // Every device has this target and multiprocessor count; `devices` of them exist.
  std::string target = "sm_90";
  int multiprocessors = 132;
  int devices = 1;
  int resident_ctas_per_sm = 4;

  const char* Name() const override { return "fake"; }
  absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) override;
  absl::StatusOr<RuntimeModule*> LoadModule(absl::string_view image, int device) override;
  void UnloadModule(RuntimeModule* module, int device) override;
  absl::StatusOr<RuntimeFunction*> GetFunction(RuntimeModule* module, int device, const std::string& name) override;
  absl::StatusOr<int> ResidentCtasPerSm(const LoadedKernel& kernel, int threads) override;
  absl::Status Launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                      const KernelArgs& args) override;

  // Managed memory as host memory; prefetches recorded (address, bytes, device, stream, to_host), frees
  // checked.
  absl::StatusOr<uintptr_t> AllocManaged(int device, size_t bytes) override;
  absl::Status FreeManaged(int device, uintptr_t address) override;
  absl::Status PrefetchManaged(int device, uintptr_t address, size_t bytes, void* stream,
                               bool to_host) override;
  struct Prefetched {
    uintptr_t address;
    size_t bytes;
    int device;
    void* stream;
    bool to_host;
  };
  std::vector<Prefetched> prefetches();
  size_t managed_allocations();  // live ones

  std::vector<Launched> launches();
  int modules_loaded();

 private:
  struct Module {
    std::string image;
    int device;
  };
  struct Function {
    Module* module;
    std::string name;
  };
  absl::Status CheckDevice(int device) const;

  std::mutex mu_;
  std::vector<std::unique_ptr<Module>> modules_;
  std::vector<std::unique_ptr<Function>> functions_;
  std::vector<Launched> launches_;
  std::vector<std::unique_ptr<char[]>> managed_;
  std::vector<Prefetched> prefetches_;
};

}  // namespace bnb::jit
