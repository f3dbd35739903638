// Forwarding header, for bnb/python/module.cc's AllKernelSpecs: the kernel families now register their specs
// themselves, in bnb/jit/kernel_registry.h. Include that instead.
#pragma once

#include "bnb/jit/kernel_registry.h"
