#include "bnb/jit/default_backend.h"

#include "bnb/jit/cuda/nvrtc_compiler.h"
#include "bnb/jit/cuda/runtime.h"

namespace bnb::jit {

std::shared_ptr<Compiler> DefaultCompiler() { return std::make_shared<cuda::NvrtcCompiler>(); }

Runtime& DefaultRuntime() { return cuda::GetCudaRuntime(); }

}  // namespace bnb::jit
