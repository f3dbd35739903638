#include "bnb/jit/kernel_registry.h"

#include <algorithm>
#include <mutex>
#include <utility>

namespace bnb::jit {
namespace {

// Built on first use: families register from other files' static initializers, in no set order.
struct Registry {
  std::mutex mu;
  std::vector<KernelFamily> families;
};

Registry& GetRegistry() {
  static Registry* const r = new Registry;
  return *r;
}

}  // namespace

bool RegisterKernelFamily(const char* name, FamilySpecsFn specs) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.families.push_back({name, specs});
  return true;
}

std::vector<KernelFamily> KernelFamilies() {
  Registry& r = GetRegistry();
  std::vector<KernelFamily> out;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    out = r.families;
  }
  std::sort(out.begin(), out.end(), [](const KernelFamily& a, const KernelFamily& b) { return a.name < b.name; });
  return out;
}

std::vector<KernelSpec> AllKernelSpecs(const std::string& arch, int threads) {
  std::vector<KernelSpec> specs;
  for (const KernelFamily& f : KernelFamilies()) {
    for (KernelSpec& s : f.specs(arch, threads)) specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace bnb::jit
