// Blockwise 8-bit quantization with any 256-entry codebook: the schemas, as bitsandbytes 0.50 has them (namespace
// bitsandbytes:: there), so code and tests port one to one.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(bnb, m) {
  m.def("quantize_blockwise(Tensor A, Tensor code, int blocksize) -> (Tensor, Tensor)");
  // Not in bitsandbytes (its functional API copies into out= / absmax=): writes codes and absmax in place. An op of
  // its own, not an overload: torch.ops.bnb.quantize_blockwise stays the one-overload packet bitsandbytes' is.
  m.def("quantize_blockwise_into(Tensor A, Tensor code, int blocksize, Tensor(a!) out, Tensor(b!) absmax) -> ()");
  m.def("dequantize_blockwise(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype) -> Tensor");
  m.def(
      "dequantize_blockwise.out(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype, Tensor! out) "
      "-> ()");
}
