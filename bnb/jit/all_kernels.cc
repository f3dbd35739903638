#include "bnb/jit/all_kernels.h"

#include "bnb/jit/blockwise8.h"

namespace bnb::jit {

const std::vector<std::string>& KernelHeaderOnlyFiles() {
  static const std::vector<std::string>* const files = new std::vector<std::string>{"bnb_common"};
  return *files;
}

std::vector<KernelSpec> AllKernelSpecs(const std::string& arch) { return AllBlockwise8Specs(arch); }

}  // namespace bnb::jit
