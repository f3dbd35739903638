#include "bnb/jit/threads_per_block.h"

#include "absl/strings/str_cat.h"
#include "bnb/core/knobs.h"

namespace bnb::jit {

int ThreadsPerBlock(int knob_value) { return knob_value == 0 ? core::kCudaThreadsPerBlockDefault : knob_value; }

absl::Status CheckThreadsPerBlock(const char* what, int threads) {
  if (threads < 32 || threads > 1024 || (threads & (threads - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " kernel: threads per block must be a power of two in [32, 1024], got ", threads));
  }
  return absl::OkStatus();
}

}  // namespace bnb::jit
