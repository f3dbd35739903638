// NVRTC for the GoogleTests that compile kernels. Bazel hands them the toolkit's libnvrtc as a runfiles-relative
// path in BNB_TEST_NVRTC_PATH (not BNB_CUDA_NVRTC_PATH: the cuda.nvrtc_path knob takes absolute paths only, and
// ignores a relative one with a warning, which left these tests skipping); made absolute here, it becomes bnb's
// fallback NVRTC, so a BNB_CUDA_NVRTC_PATH given with --test_env still wins.
#pragma once

#include <climits>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "bnb/jit/cuda/nvrtc.h"

namespace bnb::tests {

inline absl::StatusOr<const jit::cuda::Nvrtc*> TestNvrtc() {
  static const bool once = [] {
    const char* path = std::getenv("BNB_TEST_NVRTC_PATH");
    char resolved[PATH_MAX];
    if (path != nullptr && *path != '\0' && realpath(path, resolved) != nullptr) {
      jit::cuda::SetFallbackNvrtcPath(resolved);
    }
    return true;
  }();
  (void)once;
  return jit::cuda::GetNvrtc();
}

}  // namespace bnb::tests
