#include "bnb/ops/common/output_alloc.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/accumulate.h>

#include "bnb/ops/common/output_cache.h"

namespace bnb::ops {

at::Tensor EmptyOutput(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (options.device().is_cpu()) {
    const at::ScalarType dtype = c10::typeMetaToScalarType(options.dtype());
    const size_t bytes = c10::multiply_integers(sizes) * c10::elementSize(dtype);
    if (bytes >= kOutputCacheFrom) {
      return at::detail::empty_generic(sizes, OutputCacheAllocator(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                       dtype, std::nullopt);
    }
  }
  return at::empty(sizes, options);
}

at::Tensor EmptyOutputSymint(c10::SymIntArrayRef sizes, const at::TensorOptions& options) {
  if (options.device().is_cpu()) {
    if (const std::optional<at::IntArrayRef> concrete = c10::asIntArrayRefSlowOpt(sizes)) {
      return EmptyOutput(*concrete, options);
    }
  }
  return at::empty_symint(sizes, options);
}

}  // namespace bnb::ops
