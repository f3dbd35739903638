// Compilers turn a kernel spec + source into a Binary. NvrtcCompiler is the real one; tests use FakeCompiler
// (fake_compiler.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  // The options Compile() will get for `spec` (each is part of the cache key). Fails when the spec's arch
  // cannot be targeted.
  virtual absl::StatusOr<std::vector<std::string>> Options(const KernelSpec& spec) = 0;
  // Compiles `source` (which may #include any of `headers`) and returns the binary of spec.NameExpression().
  // A compile error's message holds the compiler's log, the options and spec.DebugString().
  virtual absl::StatusOr<Binary> Compile(const KernelSpec& spec, const std::string& source,
                                         const std::vector<SourceFile>& headers,
                                         const std::vector<std::string>& options) = 0;
};

// NVRTC (opened with GetNvrtc()). Options: -std=c++17, -DBNB_KNOB_<NAME>=<value> per knob,
//   -arch=sm_XX      (CUBIN) when NVRTC lists XX among its supported architectures;
//   -arch=compute_YY (PTX, JIT-compiled by the driver at load) otherwise, YY the highest supported arch <= XX;
//   -minimal         from NVRTC 12.4 on (it leaves out texture, device-runtime and CUDA-runtime-type
//                    declarations, which the kernels never use: 5-8 ms less per compile, measured with 13.0).
// An arch below every supported one is an error.
class NvrtcCompiler : public Compiler {
 public:
  absl::StatusOr<std::string> Version() override;
  absl::StatusOr<std::vector<std::string>> Options(const KernelSpec& spec) override;
  absl::StatusOr<Binary> Compile(const KernelSpec& spec, const std::string& source,
                                 const std::vector<SourceFile>& headers,
                                 const std::vector<std::string>& options) override;
};

// The option choice above, given NVRTC's version and supported architectures (exposed for tests).
absl::StatusOr<std::vector<std::string>> NvrtcOptionsFor(const KernelSpec& spec, const std::vector<int>& archs,
                                                         int nvrtc_major, int nvrtc_minor);

}  // namespace bnb::jit
