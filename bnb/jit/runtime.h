// The GPU runtime seam: what bnb/jit needs from a GPU API to run the kernels a Compiler (compiler.h) made. A
// device's target and size, loading an image into the device, finding a function in it, occupancy, launching.
// cuda/ implements it with the CUDA driver API; a ROCm port would implement it with HIP's module API in a sibling
// folder (README, "Architecture"). Nothing above this interface names a CUDA type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DeviceInfo {
  int device = 0;
  std::string target;       // what kernels for this device are compiled for (KernelSpec::arch), e.g. "sm_90"
  int multiprocessors = 0;  // streaming multiprocessors (CUDA) / compute units (ROCm)
};

// Handles a Runtime hands out; only the runtime that made one looks inside.
struct RuntimeModule;
struct RuntimeFunction;
class Runtime;

// A kernel function loaded on a device. Modules stay loaded for the life of the process, so a copy stays valid.
struct LoadedKernel {
  Runtime* runtime = nullptr;  // the runtime that loaded it, and launches it
  RuntimeModule* module = nullptr;
  RuntimeFunction* function = nullptr;
  int device = -1;
};

// The kernel's parameters as the driver takes them: values[i] points at parameter i's value, sizes[i] =
// sizeof(that value). Launch (launch.h) builds them from typed arguments.
struct KernelArgs {
  void** values = nullptr;
  const size_t* sizes = nullptr;
  size_t count = 0;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // The runtime's name for messages, e.g. "CUDA".
  virtual const char* Name() const = 0;

  // Attributes of device `device` (an ordinal, as torch numbers them). An error names a device that does not exist.
  virtual absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) = 0;

  // Loads a compiled image (a Binary's bytes) into `device`'s primary context, the one torch uses.
  virtual absl::StatusOr<RuntimeModule*> LoadModule(absl::string_view image, int device) = 0;
  // Undoes LoadModule; only for a module none of whose functions was handed out.
  virtual void UnloadModule(RuntimeModule* module, int device) = 0;
  // The function named `name` (the compiler's lowered name) in `module`.
  virtual absl::StatusOr<RuntimeFunction*> GetFunction(RuntimeModule* module, int device, const std::string& name) = 0;

  // Occupancy: how many CTAs of `threads` threads of `kernel` one multiprocessor holds at once (its registers and
  // static shared memory decide), at least 1.
  virtual absl::StatusOr<int> ResidentCtasPerSm(const LoadedKernel& kernel, int threads) = 0;

  // Launches `kernel` on `stream` (the runtime's stream handle as void*, e.g. c10::Stream::native_handle(); null
  // is the default stream), `shared_bytes` of dynamic shared memory per CTA.
  virtual absl::Status Launch(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes,
                              void* stream, const KernelArgs& args) = 0;

  // Unified (managed) memory, for paged optimizer state: `bytes` (> 0) that the driver moves between host memory
  // and `device` page by page, so more than the device holds can be allocated. An error where the device or driver
  // has none (the caller falls back to device memory). The address is the allocation's, as an integer.
  virtual absl::StatusOr<uintptr_t> AllocManaged(int device, size_t bytes) = 0;
  // Frees an AllocManaged allocation once `device` has finished all its work (kernels may still be reading it).
  virtual absl::Status FreeManaged(int device, uintptr_t address) = 0;
  // Starts moving [address, address + bytes) of managed memory to `device` (to host memory where `to_host`),
  // ordered on `stream`, one of `device`'s; OK and nothing done where the driver cannot prefetch (the pages then
  // move when first touched).
  virtual absl::Status PrefetchManaged(int device, uintptr_t address, size_t bytes, void* stream, bool to_host) = 0;
};

// runtime.LoadModule(binary.image) then GetFunction(binary.lowered_name), unloading the module when that fails.
// Errors name the image (CUBIN or PTX, its size), the function and the device.
absl::StatusOr<LoadedKernel> LoadKernel(Runtime& runtime, const Binary& binary, int device);

}  // namespace bnb::jit
