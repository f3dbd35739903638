// bnb/jit gives warnings instead of failing (a cache it cannot use, a corrupt cache file), each topic once, in
// bnb/core's one format.
#pragma once

#include "bnb/core/warnings.h"

namespace bnb::jit {

using core::OnceWarner;
using core::WarningSink;
using core::WarnToStderr;

}  // namespace bnb::jit
