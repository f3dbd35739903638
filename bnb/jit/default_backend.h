// The GPU API this build of bnb runs its kernels with, as a Runtime and the Compiler that makes images for it:
// CUDA's driver API and NVRTC. The one place that picks it; a ROCm build would return its HIP runtime and hipRTC
// compiler here.
#pragma once

#include <memory>

#include "bnb/jit/compiler.h"
#include "bnb/jit/runtime.h"

namespace bnb::jit {

// A new compiler (it opens its library lazily, at first use).
std::shared_ptr<Compiler> DefaultCompiler();

// The process's runtime (one per process, as the driver's state is).
Runtime& DefaultRuntime();

}  // namespace bnb::jit
