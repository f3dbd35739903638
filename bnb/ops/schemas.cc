// Every bnb operator schema, defined once. They mirror bitsandbytes 0.50's (namespace bitsandbytes:: there), so
// code and tests port one to one. Kernels register per backend in the op families' own files.
#include <torch/library.h>

TORCH_LIBRARY(bnb, m) {
  // Blockwise 8-bit quantization with any 256-entry codebook.
  m.def("quantize_blockwise(Tensor A, Tensor code, int blocksize) -> (Tensor, Tensor)");
  m.def("dequantize_blockwise(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype) -> Tensor");
  m.def(
      "dequantize_blockwise.out(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype, Tensor! out) "
      "-> ()");
}
