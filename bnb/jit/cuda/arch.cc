#include "bnb/jit/cuda/arch.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bnb::jit::cuda {

absl::StatusOr<int> ParseArch(const std::string& arch) {
  // Canonical spellings only ("sm_90", not "sm_090" or "sm_90 "): the string is part of the cache key, and a warm
  // cache under another spelling of the same arch would never be hit.
  int v = 0;
  const bool digits = arch.size() >= 4 && arch.size() <= 7 &&
                      std::all_of(arch.begin() + 3, arch.end(), [](char c) { return absl::ascii_isdigit(c); });
  if (!digits || arch.compare(0, 3, "sm_") != 0 || arch[3] == '0' || !absl::SimpleAtoi(arch.substr(3), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA target must look like \"sm_90\" (sm_ + compute capability), got \"", arch, "\""));
  }
  return v;
}

std::string ArchName(int arch) { return absl::StrCat("sm_", arch); }

}  // namespace bnb::jit::cuda
