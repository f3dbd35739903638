// Optimizer updates in place: 32-bit states, and 8-bit blockwise states (codes, codebooks and per-block absmax). The
// schemas, as bitsandbytes 0.50 has them (namespace bitsandbytes:: there).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(bnb, m) {
  m.def(
      "optimizer_update_32bit(str optimizer_name, Tensor(a0!) g, Tensor(a1!) p, Tensor(a2!) state1, "
      "Tensor(a3!)? state2, Tensor(a4!)? unorm_vec, float max_unorm, float param_norm, float beta1, float beta2, "
      "float beta3, float alpha, float eps, float weight_decay, int step, float lr, float gnorm_scale, "
      "bool skip_zeros=False) -> ()");
  m.def(
      "optimizer_update_8bit_blockwise(str optimizer_name, Tensor(a0!) g, Tensor(a1!) p, Tensor(a2!) state1, "
      "Tensor(a3!)? state2, float beta1, float beta2, float beta3, float alpha, float eps, int step, float lr, "
      "Tensor(a4!) qmap1, Tensor(a5!)? qmap2, Tensor(a6!) absmax1, Tensor(a7!)? absmax2, float weight_decay, "
      "float gnorm_scale, bool skip_zeros=False) -> ()");
}
