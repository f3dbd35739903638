// Output tensors for kernels.
#pragma once

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include <initializer_list>

namespace bnb::ops {

// at::empty(sizes, options). On the CPU, when the cpu.huge_pages knob is on and the tensor is large, its pages are
// advised as transparent huge pages before the kernel first writes them: a fresh output can then fault in 2 MB pages
// instead of 4 KB ones, which cuts its first-touch cost (figures: tools/bench/NOTES.md, 'Huge-page outputs'). Only
// the tensor's own memory is advised; the advice changes no value.
at::Tensor EmptyOutput(at::IntArrayRef sizes, const at::TensorOptions& options);

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
