// CUDA's device targets, "sm_XX" (XX = 10 * major + minor compute capability): the spelling bnb/jit's kernel specs
// and cache keys use for CUDA devices.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace bnb::jit::cuda {

// Parses "sm_90" -> 90. Canonical spellings only; the error names the text and the expected form.
absl::StatusOr<int> ParseArch(const std::string& arch);

// 90 -> "sm_90".
std::string ArchName(int arch);

}  // namespace bnb::jit::cuda
