#include "bnb/jit/all_kernels.h"

#include <utility>

#include "bnb/jit/blockwise4.h"
#include "bnb/jit/blockwise8.h"

namespace bnb::jit {

const std::vector<std::string>& KernelHeaderOnlyFiles() {
  static const std::vector<std::string>* const files =
      new std::vector<std::string>{"bnb_common", "codebook4", "codebook8", "numerics"};
  return *files;
}

std::vector<KernelSpec> AllKernelSpecs(const std::string& arch, int threads) {
  std::vector<KernelSpec> specs = AllBlockwise8Specs(arch, threads);
  for (KernelSpec& s : AllBlockwise4Specs(arch, threads)) specs.push_back(std::move(s));
  return specs;
}

}  // namespace bnb::jit
