// Forwarding header, for bnb/python/module.cc's SetFallbackNvrtcPath: the CUDA driver and NVRTC wrappers now live
// in bnb/jit/cuda/ (driver.h, nvrtc.h). Include those instead.
#pragma once

#include "bnb/jit/cuda/nvrtc.h"

namespace bnb::jit {

using cuda::SetFallbackNvrtcPath;

}  // namespace bnb::jit
