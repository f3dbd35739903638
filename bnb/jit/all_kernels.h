// Every kernel bnb instantiates, per template: what `python -m bnb cache warm` compiles and the NVRTC test checks.
// A new template under bnb/jit/kernels adds its specs here (the NVRTC test fails for a template with none).
#pragma once

#include <string>
#include <vector>

#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

// Files under bnb/jit/kernels that are included by templates but define no kernels of their own.
const std::vector<std::string>& KernelHeaderOnlyFiles();

// Every spec the ops launch, for `arch`, with `threads` per block where the ops take the cuda.threads_per_block
// knob (0: the default), so that a warm cache holds what a run with that knob loads.
std::vector<KernelSpec> AllKernelSpecs(const std::string& arch, int threads = 0);

}  // namespace bnb::jit
