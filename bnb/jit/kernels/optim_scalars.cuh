// One optimizer step's scalars as the kernels of optim.cuh take them, by value: bnb::core::OptimStep's fields
// (bnb/core/optim.h says what each is), in a header that also compiles as plain host C++ (optim_scalars_host.h), so
// the host fills the very struct the kernels read.
#pragma once

namespace bnb {
namespace opt {

struct Scalars {
  float gnorm_scale, decay, weight_decay;
  float b1, b2, b3, one_minus_b1, one_minus_b2, one_minus_b3;
  float lr, neg_lr, eps, alpha;
  float adam_step_size, adam_eps_c2, adam_neg_lr_c1, c1, c2, inv_c1, inv_c2_squared;
  float clip_limit;  // 32-bit with a trust ratio: f32(max_unorm * param_norm (+ eps)); the kernel computes clip
  int skip_zeros, first_step, decoupled_decay, coupled_decay;
};

}  // namespace opt
}  // namespace bnb
