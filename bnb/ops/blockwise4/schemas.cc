// 4-bit NF4 / FP4: two codes per byte (high nibble first), stored as any dtype (quant_storage). The schemas, as
// bitsandbytes 0.50 has them (namespace bitsandbytes:: there).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(bnb, m) {
  m.def("quantize_4bit(Tensor A, int blocksize, str quant_type, ScalarType quant_storage) -> (Tensor, Tensor)");
  // bnb's own, as quantize_blockwise_into: into existing tensors, out of quantize_4bit's packed shape for its dtype
  // as quant_storage and absmax of one float32 per block (F.quantize_4bit's out= and absmax=).
  m.def("quantize_4bit_into(Tensor A, int blocksize, str quant_type, Tensor(a!) out, Tensor(b!) absmax) -> ()");
  m.def(
      "dequantize_4bit(Tensor A, Tensor absmax, int blocksize, str quant_type, int[] shape, ScalarType dtype) "
      "-> Tensor");
  m.def(
      "dequantize_4bit.out(Tensor A, Tensor absmax, int blocksize, str quant_type, int[] shape, ScalarType dtype, "
      "Tensor! out) -> ()");
  // gemv_4bit adds gemm_4bit's nested statistics (absmax_8bit, absmax_code, absmax_offset) after bitsandbytes'
  // arguments, so a kernel reads the 8-bit scales itself instead of a float32 absmax dequantized per call; a call
  // as bitsandbytes writes it (six arguments, out= by keyword) is unchanged.
  m.def(
      "gemv_4bit(Tensor A, Tensor B, int[] shapeB, Tensor absmax, Tensor code, int blocksize, "
      "Tensor? absmax_8bit=None, Tensor? absmax_code=None, Tensor? absmax_offset=None) -> Tensor");
  m.def(
      "gemv_4bit.out(Tensor A, Tensor B, int[] shapeB, Tensor absmax, Tensor code, int blocksize, "
      "Tensor? absmax_8bit=None, Tensor? absmax_code=None, Tensor? absmax_offset=None, *, Tensor! out) -> ()");
  m.def(
      "gemm_4bit(Tensor A, Tensor B, int[] shapeB, Tensor absmax, int blocksize, str quant_type, Tensor? bias=None, "
      "Tensor? absmax_8bit=None, Tensor? absmax_code=None, Tensor? absmax_offset=None) -> Tensor");
  // bnb's own: a CPU layout of a 4-bit weight, rows in tiles of 16 (bnb/core/gemm4_packed.h), made once per weight,
  // and the product over it. pack_4bit takes float32 scales (nested statistics dequantized first) and returns
  // (codes, scales) in the layout; gemm_4bit_packed multiplies A by the weight they hold, transposed, and with
  // int8_activations quantizes A's rows to int8 per group of 64 columns and multiplies integers (bnb/core/
  // gemm4_packed.h defines it; opt-in, knob cpu.int8_activations: faster, less exact).
  m.def("pack_4bit(Tensor B, int[] shapeB, Tensor absmax, int blocksize) -> (Tensor, Tensor)");
  // bnb's own: pack_4bit's codes back to bitsandbytes' bytes (uint8, N * K / 2), bit for bit.
  m.def("unpack_4bit(Tensor codes, int[] shapeB) -> Tensor");
  m.def(
      "gemm_4bit_packed(Tensor A, Tensor codes, Tensor scales, int[] shapeB, int blocksize, Tensor code, "
      "Tensor? bias=None, bool int8_activations=False) -> Tensor");
}
