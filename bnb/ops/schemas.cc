// Every bnb operator schema, defined once. They mirror bitsandbytes 0.50's (namespace bitsandbytes:: there), so
// code and tests port one to one. Kernels register per backend in the op families' own files.
#include <torch/library.h>

TORCH_LIBRARY(bnb, m) {
  // Blockwise 8-bit quantization with any 256-entry codebook.
  m.def("quantize_blockwise(Tensor A, Tensor code, int blocksize) -> (Tensor, Tensor)");
  // Not in bitsandbytes (its functional API copies into out= / absmax=): writes codes and absmax in place. An op of
  // its own, not an overload: torch.ops.bnb.quantize_blockwise stays the one-overload packet bitsandbytes' is.
  m.def("quantize_blockwise_into(Tensor A, Tensor code, int blocksize, Tensor(a!) out, Tensor(b!) absmax) -> ()");
  m.def("dequantize_blockwise(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype) -> Tensor");
  m.def(
      "dequantize_blockwise.out(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype, Tensor! out) "
      "-> ()");

  // 4-bit NF4 / FP4: two codes per byte (high nibble first), stored as any dtype (quant_storage).
  m.def("quantize_4bit(Tensor A, int blocksize, str quant_type, ScalarType quant_storage) -> (Tensor, Tensor)");
  m.def(
      "dequantize_4bit(Tensor A, Tensor absmax, int blocksize, str quant_type, int[] shape, ScalarType dtype) "
      "-> Tensor");
  m.def(
      "dequantize_4bit.out(Tensor A, Tensor absmax, int blocksize, str quant_type, int[] shape, ScalarType dtype, "
      "Tensor! out) -> ()");
  m.def("gemv_4bit(Tensor A, Tensor B, int[] shapeB, Tensor absmax, Tensor code, int blocksize) -> Tensor");
  m.def(
      "gemv_4bit.out(Tensor A, Tensor B, int[] shapeB, Tensor absmax, Tensor code, int blocksize, Tensor! out) "
      "-> ()");
  m.def(
      "gemm_4bit(Tensor A, Tensor B, int[] shapeB, Tensor absmax, int blocksize, str quant_type, Tensor? bias=None, "
      "Tensor? absmax_8bit=None, Tensor? absmax_code=None, Tensor? absmax_offset=None) -> Tensor");
}
