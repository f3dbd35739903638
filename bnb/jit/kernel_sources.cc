#include "bnb/jit/kernel_sources.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bnb::jit {

const std::vector<EmbeddedFile>& KernelFiles() {
  static const std::vector<EmbeddedFile>* const files = [] {
    auto* v = new std::vector<EmbeddedFile>(kEmbeddedKernels, kEmbeddedKernels + kNumEmbeddedKernels);
    std::sort(v->begin(), v->end(),
              [](const EmbeddedFile& a, const EmbeddedFile& b) { return std::string(a.name) < b.name; });
    return v;
  }();
  return *files;
}

std::vector<std::string> KernelTemplateNames() {
  std::vector<std::string> names;
  for (const EmbeddedFile& f : KernelFiles()) {
    std::string n = f.name;
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".cuh") == 0) n.resize(n.size() - 4);
    names.push_back(n);
  }
  return names;
}

absl::StatusOr<absl::string_view> KernelSource(absl::string_view name) {
  std::string file(name);
  if (file.size() < 4 || file.compare(file.size() - 4, 4, ".cuh") != 0) file += ".cuh";
  for (const EmbeddedFile& f : KernelFiles()) {
    if (file == f.name) return absl::string_view(f.text);
  }
  return absl::NotFoundError(absl::StrCat("bnb/jit: no kernel template \"", std::string(name),
                                          "\"; the embedded templates are: ",
                                          absl::StrJoin(KernelTemplateNames(), ", ")));
}

}  // namespace bnb::jit
