// The ops autograd has no formula for, marked so: their outputs do not require grad, whatever their inputs do.
// Without this, torch's fallback gave outputs a grad_fn that warned on backward ("silently incorrect") and left
// the inputs' grads None. quantize's codes are integers; its absmax and the dequantized values, while piecewise
// differentiable in theory, are not what any user differentiates (QLoRA's gradients flow through matmul_4bit).
// gemv_4bit and gemm_4bit do have gradients in A and bias: bnb/python/bnb/autograd.py registers them.
#include <torch/library.h>

namespace bnb::ops {

TORCH_LIBRARY_IMPL(bnb, Autograd, m) {
  for (const char* name : {"quantize_blockwise", "quantize_blockwise_into", "dequantize_blockwise",
                           "dequantize_blockwise.out", "quantize_4bit", "dequantize_4bit", "dequantize_4bit.out",
                           "gemv_4bit.out"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
}

}  // namespace bnb::ops
