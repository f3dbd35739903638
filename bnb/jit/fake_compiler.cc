#include "bnb/jit/fake_compiler.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bnb/jit/cuda/arch.h"
#include "bnb/jit/sha256.h"

namespace bnb::jit {

absl::Status FakeCompiler::CheckTarget(const std::string& target) { return cuda::ParseArch(target).status(); }

absl::StatusOr<std::vector<std::string>> FakeCompiler::Options(const KernelSpec& spec) {
  std::vector<std::string> o = {"-std=c++17", absl::StrCat("-arch=", spec.arch)};
  for (const auto& [name, value] : spec.knobs) o.push_back(absl::StrCat("-DBNB_KNOB_", name, "=", value));
  o.insert(o.end(), extra_options.begin(), extra_options.end());
  std::sort(o.begin(), o.end());
  return o;
}

absl::StatusOr<Binary> FakeCompiler::Compile(const KernelSpec& spec, const std::string& source,
                                             const std::vector<SourceFile>& headers,
                                             const std::vector<std::string>& options) {
  calls.fetch_add(1);
  if (const int ms = sleep_ms.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  if (fail.load()) {
    return absl::InvalidArgumentError(absl::StrCat("fake compile error; kernel ", spec.DebugString(),
                                                   "; options: ", absl::StrJoin(options, " ")));
  }
  Binary b;
  b.kind = BinaryKind::kCubin;
  b.lowered_name = absl::StrCat("fake_", spec.entry);
  b.image = absl::StrCat("FAKE-CUBIN ", spec.DebugString(), " ", Sha256Hex(source), " headers=", headers.size());
  return b;
}

}  // namespace bnb::jit
