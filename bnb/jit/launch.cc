#include "bnb/jit/launch.h"

#include "absl/strings/str_cat.h"

namespace bnb::jit {

absl::Status LaunchPacked(const LoadedKernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, void* stream,
                          const KernelArgs& args) {
  if (kernel.runtime == nullptr || kernel.function == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("launch of a kernel that was never loaded (device ", kernel.device, ")"));
  }
  return kernel.runtime->Launch(kernel, grid, block, shared_bytes, stream, args);
}

}  // namespace bnb::jit
