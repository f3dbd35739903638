#include "bnb/jit/runtime.h"

#include "absl/strings/str_cat.h"

namespace bnb::jit {

absl::StatusOr<LoadedKernel> LoadKernel(Runtime& runtime, const Binary& binary, int device) {
  const auto context = [&] {
    return absl::StrCat(" (", binary.kind == BinaryKind::kCubin ? "CUBIN" : "PTX", ", ", binary.image.size(),
                        " bytes, kernel ", binary.lowered_name, ") on ", runtime.Name(), " device ", device);
  };
  absl::StatusOr<RuntimeModule*> module = runtime.LoadModule(binary.image, device);
  if (!module.ok()) {
    return absl::Status(module.status().code(), absl::StrCat(module.status().message(), context()));
  }
  absl::StatusOr<RuntimeFunction*> function = runtime.GetFunction(*module, device, binary.lowered_name);
  if (!function.ok()) {
    runtime.UnloadModule(*module, device);
    return absl::Status(function.status().code(), absl::StrCat(function.status().message(), context()));
  }
  LoadedKernel k;
  k.runtime = &runtime;
  k.module = *module;
  k.function = *function;
  k.device = device;
  return k;
}

}  // namespace bnb::jit
