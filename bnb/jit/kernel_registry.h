// Every kernel bnb launches, registered by the family that launches it: each bnb/jit/<family>.cc names a function
// giving all its specs, at namespace scope,
//   BNB_REGISTER_KERNEL_FAMILY(blockwise8, AllBlockwise8Specs);
// and `python -m bnb cache warm` and the NVRTC test walk the registry. A new family adds its own line, nothing
// central; a template under bnb/jit/kernels whose kernels no family registers fails jit_registry_test.
// (//bnb/jit is alwayslink, so a family's registration is linked even where nothing calls into its file.)
#pragma once

#include <string>
#include <vector>

#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

// All of a family's specs for target `arch`, with `threads` the cuda.threads_per_block knob's value as the ops
// pass it (0: the default) where the family's kernels take it, so that a warm cache holds what a run with that knob
// setting loads.
using FamilySpecsFn = std::vector<KernelSpec> (*)(const std::string& arch, int threads);

struct KernelFamily {
  std::string name;
  FamilySpecsFn specs;
};

// Adds a family (at static initialization: use the macro). Returns true.
bool RegisterKernelFamily(const char* name, FamilySpecsFn specs);

// The registered families, by name.
std::vector<KernelFamily> KernelFamilies();

// Every registered family's specs, families by name.
std::vector<KernelSpec> AllKernelSpecs(const std::string& arch, int threads = 0);

}  // namespace bnb::jit

#define BNB_REGISTER_KERNEL_FAMILY(name, specs_fn) \
  static const bool bnb_kernel_family_registered_##name = ::bnb::jit::RegisterKernelFamily(#name, specs_fn)
