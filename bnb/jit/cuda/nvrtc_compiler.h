// The Compiler of the CUDA runtime: NVRTC (opened with GetNvrtc()), compiling for "sm_XX" targets.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/jit/compiler.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::jit::cuda {

// Options: -std=c++17, -DBNB_KNOB_<NAME>=<value> per knob,
//   -arch=sm_XX      (CUBIN) when NVRTC lists XX among its supported architectures;
//   -arch=compute_YY (PTX, JIT-compiled by the driver at load) otherwise, YY the highest supported arch <= XX;
//   -minimal         from NVRTC 12.4 on (it leaves out texture, device-runtime and CUDA-runtime-type
//                    declarations, which the kernels never use, and compiles faster).
// An arch below every supported one is an error.
class NvrtcCompiler : public Compiler {
 public:
  absl::StatusOr<std::string> Version() override;
  absl::Status CheckTarget(const std::string& target) override;
  absl::StatusOr<std::vector<std::string>> Options(const KernelSpec& spec) override;
  absl::StatusOr<Binary> Compile(const KernelSpec& spec, const std::string& source,
                                 const std::vector<SourceFile>& headers,
                                 const std::vector<std::string>& options) override;
};

// The option choice above, given NVRTC's version and supported architectures (exposed for tests).
absl::StatusOr<std::vector<std::string>> NvrtcOptionsFor(const KernelSpec& spec, const std::vector<int>& archs,
                                                         int nvrtc_major, int nvrtc_minor);

}  // namespace bnb::jit::cuda
