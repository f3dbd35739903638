// A Compiler for tests: no NVRTC, deterministic output, counts its calls, can fail or be slow on demand.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "bnb/jit/compiler.h"

namespace bnb::jit {

class FakeCompiler : public Compiler {
 public:
  absl::StatusOr<std::string> Version() override { return version; }
  // CUDA's "sm_XX" rule (cuda/arch.h), as the NVRTC compiler it stands in for.
  absl::Status CheckTarget(const std::string& target) override;
  absl::StatusOr<std::vector<std::string>> Options(const KernelSpec& spec) override;
  // Returns a CUBIN-kind Binary whose lowered name is "fake_<entry>" and whose image names the spec and holds
  // a hash of the source; or InvalidArgument when `fail` is set. Sleeps `sleep_ms` first.
  absl::StatusOr<Binary> Compile(const KernelSpec& spec, const std::string& source,
                                 const std::vector<SourceFile>& headers,
                                 const std::vector<std::string>& options) override;

  std::atomic<int> calls{0};
  std::atomic<bool> fail{false};
  std::atomic<int> sleep_ms{0};
  std::string version = "fake 1.0";
  std::vector<std::string> extra_options;  // appended to Options(); change between calls to test the key
};

}  // namespace bnb::jit
