// Every kernel bnb instantiates, per template: what `python -m bnb cache warm` compiles and the NVRTC test checks.
// A new template under bnb/jit/kernels adds its specs here (the NVRTC test fails for a template with none).
#pragma once

#include <string>
#include <vector>

#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

// Files under bnb/jit/kernels that are included by templates but define no kernels of their own.
const std::vector<std::string>& KernelHeaderOnlyFiles();

// Every spec, for `arch`, with default code-shaping knobs.
std::vector<KernelSpec> AllKernelSpecs(const std::string& arch);

}  // namespace bnb::jit
