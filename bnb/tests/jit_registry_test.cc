// The kernel registry: every kernel a template under bnb/jit/kernels defines is registered by a family (so cache
// warm and the NVRTC test cover it), and every registered spec names a kernel that exists.
#include "bnb/jit/kernel_registry.h"

#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bnb/jit/blockwise4.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_sources.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

bool IsIdentifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The names of the __global__ functions `text` defines: the identifier before the first '(' of each declaration
// that is not __launch_bounds__'s.
std::set<std::string> GlobalFunctions(const std::string& text) {
  std::set<std::string> names;
  for (size_t g = text.find("__global__"); g != std::string::npos; g = text.find("__global__", g + 1)) {
    size_t open = g;
    for (;;) {
      open = text.find('(', open + 1);
      if (open == std::string::npos) return names;
      size_t start = open;
      while (start > 0 && IsIdentifierChar(text[start - 1])) --start;
      const std::string name = text.substr(start, open - start);
      if (name != "__launch_bounds__") {
        names.insert(name);
        break;
      }
    }
  }
  return names;
}

TEST(KernelRegistry, FamiliesRegisterThemselves) {
  std::vector<std::string> names;
  for (const KernelFamily& f : KernelFamilies()) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"blockwise4", "blockwise8"}));
}

TEST(KernelRegistry, AllSpecsAreEveryFamilysWithTheThreadsGiven) {
  std::vector<std::string> want, got;
  for (const KernelSpec& s : AllBlockwise4Specs("sm_80", 128)) want.push_back(s.DebugString());
  for (const KernelSpec& s : AllBlockwise8Specs("sm_80", 128)) want.push_back(s.DebugString());
  for (const KernelSpec& s : AllKernelSpecs("sm_80", 128)) got.push_back(s.DebugString());
  EXPECT_EQ(got, want);
}

TEST(KernelRegistry, GlobalFunctionsParse) {
  EXPECT_EQ(GlobalFunctions("template <int T>\n__global__ void __launch_bounds__(T, 1024 / T)\n    k1(int a) {}\n"
                            "__global__ void k2() {}\n"),
            (std::set<std::string>{"k1", "k2"}));
}

// The check a new template needs: its kernels must be registered by some family, or warm and the NVRTC test
// would never compile them.
TEST(KernelRegistry, EveryKernelOfEveryTemplateIsRegistered) {
  std::map<std::string, std::set<std::string>> registered;  // template -> entries
  for (const KernelSpec& s : AllKernelSpecs("sm_90")) registered[s.template_name].insert(s.entry);
  for (const std::string& name : KernelTemplateNames()) {
    const std::set<std::string> kernels = GlobalFunctions(std::string(*KernelSource(name)));
    for (const std::string& k : kernels) {
      EXPECT_TRUE(registered[name].count(k)) << "kernels/" << name << ".cuh defines kernel " << k
                                             << ", which no family registers (kernel_registry.h)";
    }
  }
  for (const auto& [name, entries] : registered) {
    absl::StatusOr<absl::string_view> text = KernelSource(name);
    ASSERT_TRUE(text.ok()) << text.status();
    const std::set<std::string> kernels = GlobalFunctions(std::string(*text));
    for (const std::string& e : entries) EXPECT_TRUE(kernels.count(e)) << name << ".cuh has no kernel " << e;
  }
}

}  // namespace
}  // namespace bnb::jit
