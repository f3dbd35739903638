// gemm_4bit on every backend: the weight dequantized through the dispatcher (so by whichever backend serves A's
// device), then at::linear; and the nested statistics dequantized the same way, for gemm_4bit and for gemv_4bit
// on backends whose kernel does not read them.
#include <ATen/core/dispatch/Dispatcher.h>

#include "bnb/ops/blockwise4/ops.h"

namespace bnb::ops::blockwise4 {

at::Tensor NestedScales(const char* op, const at::Tensor& absmax, const Nested& nested) {
  if (!nested.present()) return absmax;
  static const auto dequantize8 =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("bnb::dequantize_blockwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, c10::ScalarType)>();
  at::Tensor scales;
  try {
    scales = dequantize8.call(*nested.absmax_8bit, absmax, *nested.absmax_code, core::kNestedBlocksize, at::kFloat);
  } catch (const c10::Error& e) {  // a bad codebook in a checkpoint: say which argument holds it
    TORCH_CHECK(false, "bnb::", op, ": dequantizing absmax_8bit by absmax_code: ", e.msg());
  }
  return scales.add_(nested.absmax_offset->to(scales.options()).reshape({}));
}

at::Tensor GemmByDequantize(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                            const at::Tensor& absmax, int64_t blocksize, c10::string_view quant_type,
                            const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& absmax_8bit,
                            const c10::optional<at::Tensor>& absmax_code,
                            const c10::optional<at::Tensor>& absmax_offset) {
  static const auto dequantize4 =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("bnb::dequantize_4bit", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, c10::string_view, at::IntArrayRef,
                            c10::ScalarType)>();
  const at::Tensor scales = NestedScales(op, absmax, Nested{absmax_8bit, absmax_code, absmax_offset});
  const at::Tensor W = dequantize4.call(B, scales, blocksize, quant_type, shapeB, A.scalar_type());
  return at::linear(A, W, bias);
}

}  // namespace bnb::ops::blockwise4
