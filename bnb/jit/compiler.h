// Compilers turn a kernel spec + source into a Binary for the spec's target. Each GPU runtime comes with its own
// (NVRTC for CUDA: cuda/nvrtc_compiler.h); tests use FakeCompiler (fake_compiler.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

struct SourceFile {
  std::string name;  // the name #include uses, e.g. "blockwise8.cuh"
  std::string text;
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  // Names the compiler and its version, e.g. "nvrtc 13.0 (61234567 bytes)"; part of every cache key.
  virtual absl::StatusOr<std::string> Version() = 0;
  // OK when `target` is a device target this kind of compiler knows, in its one canonical spelling (the target
  // is part of the cache key: another spelling of the same device would key kernels that runs never hit). The
  // error names the target and the expected form. Says nothing on whether this compiler's version can target it.
  virtual absl::Status CheckTarget(const std::string& target) = 0;
  // The options Compile() will get for `spec` (each is part of the cache key). Fails when the spec's arch
  // cannot be targeted.
  virtual absl::StatusOr<std::vector<std::string>> Options(const KernelSpec& spec) = 0;
  // Compiles `source` (which may #include any of `headers`) and returns the binary of spec.NameExpression().
  // A compile error's message holds the compiler's log, the options and spec.DebugString().
  virtual absl::StatusOr<Binary> Compile(const KernelSpec& spec, const std::string& source,
                                         const std::vector<SourceFile>& headers,
                                         const std::vector<std::string>& options) = 0;
};

}  // namespace bnb::jit
