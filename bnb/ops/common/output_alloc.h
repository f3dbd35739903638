// Output tensors for kernels.
#pragma once

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include <initializer_list>

namespace bnb::ops {

// at::empty(sizes, options). Large CPU outputs come from the output cache (output_cache.h): memory an earlier
// output freed, else a fresh mapping advised as transparent huge pages when the cpu.huge_pages knob is on, so it
// faults in 2 MB pages instead of 4 KB ones (figures: tools/bench/NOTES.md, 'Huge-page outputs', 'Output cache').
at::Tensor EmptyOutput(at::IntArrayRef sizes, const at::TensorOptions& options);
// The same for shapes of symbolic integers (the meta kernels' traced shapes stay with at::empty_symint).
at::Tensor EmptyOutputSymint(c10::SymIntArrayRef sizes, const at::TensorOptions& options);

// For out= arguments: runs fill(dst) on a contiguous tensor of out's shape and dtype that shares no memory with
// `inputs` - out itself when it qualifies, else a temporary copied into out afterwards - so a strided out, or one
// aliasing an input, still receives exactly the values a fresh output would.
template <class Fill>
void FillOut(at::Tensor& out, c10::ArrayRef<const at::Tensor*> inputs, const Fill& fill) {
  bool direct = out.is_contiguous();
  for (const at::Tensor* in : inputs) {
    direct = direct && at::get_overlap_status(out, *in) == at::MemOverlapStatus::No;
  }
  if (direct) {
    fill(out);
  } else {
    at::Tensor tmp = at::empty(out.sizes(), out.options());
    fill(tmp);
    out.copy_(tmp);
  }
}

}  // namespace bnb::ops
