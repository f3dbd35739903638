// The kernel templates (bnb/jit/kernels/*.cuh), embedded into the library at build time by a genrule.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bnb::jit {

struct EmbeddedFile {
  const char* name;  // file name, e.g. "blockwise8.cuh"
  const char* text;
};

// Every embedded .cuh file, in file-name order.
const std::vector<EmbeddedFile>& KernelFiles();

// The text of template `name` ("blockwise8" or "blockwise8.cuh"); NotFound lists the templates there are.
absl::StatusOr<absl::string_view> KernelSource(absl::string_view name);

// Names of the embedded files without ".cuh", sorted.
std::vector<std::string> KernelTemplateNames();

// Generated (kernels_embedded.cc).
extern const EmbeddedFile kEmbeddedKernels[];
extern const int kNumEmbeddedKernels;

}  // namespace bnb::jit
