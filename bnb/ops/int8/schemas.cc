// LLM.int8(): row-wise int8 quantization with fp16 outlier columns and int8 x int8 -> int32 products. The schemas,
// as bitsandbytes 0.50 has them (namespace bitsandbytes:: there).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(bnb, m) {
  m.def("int8_vectorwise_quant(Tensor A, float threshold=0.0) -> (Tensor, Tensor, Tensor?)");
  m.def("int8_vectorwise_dequant(Tensor A, Tensor stats) -> Tensor");
  m.def("int8_double_quant(Tensor A, float threshold=0.0) -> (Tensor, Tensor, Tensor, Tensor, Tensor?)");
  m.def("int8_linear_matmul(Tensor A, Tensor B) -> Tensor");
  m.def("int8_linear_matmul.out(Tensor A, Tensor B, Tensor! out) -> ()");
  m.def(
      "int8_mm_dequant(Tensor A, Tensor row_stats, Tensor col_stats, ScalarType? dtype=None, Tensor? bias=None) "
      "-> Tensor");
  m.def(
      "int8_scaled_mm(Tensor A, Tensor B, Tensor row_stats, Tensor col_stats, Tensor? bias=None, "
      "ScalarType? dtype=None) -> Tensor");
  m.def(
      "int8_mixed_scaled_mm(Tensor A, Tensor CA, Tensor CB, Tensor SCA, Tensor SCB, Tensor? outlier_cols=None, "
      "Tensor? bias=None) -> (Tensor, Tensor?)");
}
