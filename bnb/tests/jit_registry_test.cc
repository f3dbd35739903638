// The kernel registry: every kernel a template under bnb/jit/kernels defines is registered by a family (so cache
// warm and the NVRTC test cover it), and every registered spec names a kernel that exists.
#include "bnb/jit/kernel_registry.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_sources.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

bool IsIdentifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The names of the __global__ functions `text` defines: the identifier before the first '(' of each declaration
// after __launch_bounds__'s arguments (which may hold calls of their own).
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
      // Past the matching ')'.
      for (int depth = 1; depth > 0 && open + 1 < text.size();) {
        const char c = text[++open];
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      }
    }
  }
  return names;
}

// Each template that defines kernels is one family, registered under the template's name, by name.
TEST(KernelRegistry, FamiliesRegisterThemselves) {
  std::vector<std::string> names, templates;
  for (const KernelFamily& f : KernelFamilies()) names.push_back(f.name);
  for (const std::string& t : KernelTemplateNames()) {
    if (!GlobalFunctions(std::string(*KernelSource(t))).empty()) templates.push_back(t);
  }
  std::sort(templates.begin(), templates.end());
  EXPECT_EQ(names, templates);
  EXPECT_GE(names.size(), 3u);  // blockwise4, blockwise8, int8 at least
}

TEST(KernelRegistry, AllSpecsAreEveryFamilysWithTheThreadsGiven) {
  std::vector<std::string> want, got;
  for (const KernelFamily& f : KernelFamilies()) {
    for (const KernelSpec& s : f.specs("sm_80", 128)) want.push_back(s.DebugString());
  }
  for (const KernelSpec& s : AllKernelSpecs("sm_80", 128)) got.push_back(s.DebugString());
  EXPECT_EQ(got, want);
  // The family functions are the ones the family files define.
  std::vector<std::string> blockwise8;
  for (const KernelSpec& s : AllBlockwise8Specs("sm_80", 128)) blockwise8.push_back(s.DebugString());
  EXPECT_TRUE(std::search(got.begin(), got.end(), blockwise8.begin(), blockwise8.end()) != got.end());
}

TEST(KernelRegistry, GlobalFunctionsParse) {
  EXPECT_EQ(GlobalFunctions("template <int T>\n__global__ void __launch_bounds__(T, 1024 / T)\n    k1(int a) {}\n"
                            "__global__ void k2() {}\n"
                            "__global__ void __launch_bounds__(T, ns::f(T, (1))) k3(int a) {}\n"),
            (std::set<std::string>{"k1", "k2", "k3"}));
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
