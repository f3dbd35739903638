// Optimizer update ops (schemas.cc): their argument checks, written once over a backend that supplies the updates
// (see bnb/ops/blockwise8/ops.h for the pattern). The ops write p and the states in place and return nothing, so a
// failed check leaves everything as it was. A backend is a struct of static members:
//
//   struct MyBackend {
//     static constexpr bool kIsMeta = false;  // true: checks only, and none of the functions below
//     // 32-bit states (float32). `step` holds the scalars (bnb/core/optim.h); clip is still 1: the backend applies
//     // the trust ratio where max_unorm > 0 (UpdateNorm below says how).
//     static void Update32(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
//                          const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec);
//     // 8-bit blockwise states: codes, codebooks qmap1 / qmap2 and per-block absmax (blocks of 256).
//     static void Update8(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
//                         const c10::optional<at::Tensor>& state2, at::Tensor& qmap1,
//                         const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
//                         const c10::optional<at::Tensor>& absmax2);
//   };
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include "bnb/core/optim.h"
#include "bnb/ops/common/checks.h"

namespace bnb::ops::optim {

// A checked call: the optimizer, p's element type, one step's scalars and the trust ratio's arguments.
struct Update {
  core::OptimKind kind;
  core::DType dtype;
  core::OptimStep step;
  int64_t n;          // p's elements
  double max_unorm;   // > 0: the 32-bit trust ratio (lamb, lars), with param_norm and eps
  double param_norm;
  double eps;
};

// The checks both ops share (optimizer, g, p, the states' dtype, count and device, step).
core::OptimKind CheckCommon(const char* op, c10::string_view name, const at::Tensor& g, const at::Tensor& p,
                            const at::Tensor& state1, const c10::optional<at::Tensor>& state2, bool eight_bit,
                            int64_t step);

// optimizer_update_32bit's trust-ratio arguments.
void CheckUnorm(const char* op, const core::OptimKind& kind, c10::string_view name, double max_unorm,
                const c10::optional<at::Tensor>& unorm_vec, const at::Tensor& p);

// optimizer_update_8bit_blockwise's codebooks and absmax.
void CheckCodebooks(const char* op, const core::OptimKind& kind, c10::string_view name, const at::Tensor& p,
                    const at::Tensor& qmap1, const c10::optional<at::Tensor>& qmap2, const at::Tensor& absmax1,
                    const c10::optional<at::Tensor>& absmax2);

// t itself when contiguous, else a contiguous copy; Written(t, c) copies c back into t when they differ.
inline at::Tensor Contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
inline void WriteBack(at::Tensor& t, const at::Tensor& c) {
  if (!c.is_same(t)) t.copy_(c);
}

template <class Backend>
struct Ops {
  static void Update32bit(c10::string_view optimizer_name, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                          const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec,
                          double max_unorm, double param_norm, double beta1, double beta2, double beta3,
                          double alpha, double eps, double weight_decay, int64_t step, double lr, double gnorm_scale,
                          bool skip_zeros) {
    constexpr const char* op = "optimizer_update_32bit";
    const core::OptimKind kind = CheckCommon(op, optimizer_name, g, p, state1, state2, false, step);
    CheckUnorm(op, kind, optimizer_name, max_unorm, unorm_vec, p);
    if constexpr (!Backend::kIsMeta) {
      const Update u{kind, FloatDType(op, "p", p.scalar_type()),
                     core::MakeOptimStep(kind.rule, false, beta1, beta2, beta3, alpha, eps, weight_decay, step, lr,
                                         gnorm_scale, skip_zeros),
                     p.numel(), max_unorm, param_norm, eps};
      Backend::Update32(op, u, g, p, state1, state2, unorm_vec);
    }
  }

  static void Update8bit(c10::string_view optimizer_name, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                         const c10::optional<at::Tensor>& state2, double beta1, double beta2, double beta3,
                         double alpha, double eps, int64_t step, double lr, at::Tensor& qmap1,
                         const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
                         const c10::optional<at::Tensor>& absmax2, double weight_decay, double gnorm_scale,
                         bool skip_zeros) {
    constexpr const char* op = "optimizer_update_8bit_blockwise";
    const core::OptimKind kind = CheckCommon(op, optimizer_name, g, p, state1, state2, true, step);
    CheckCodebooks(op, kind, optimizer_name, p, qmap1, qmap2, absmax1, absmax2);
    if constexpr (!Backend::kIsMeta) {
      const Update u{kind, FloatDType(op, "p", p.scalar_type()),
                     core::MakeOptimStep(kind.rule, true, beta1, beta2, beta3, alpha, eps, weight_decay, step, lr,
                                         gnorm_scale, skip_zeros),
                     p.numel(), 0.0, 0.0, eps};
      Backend::Update8(op, u, g, p, state1, state2, qmap1, qmap2, absmax1, absmax2);
    }
  }

  static void Register(torch::Library& m) {
    m.impl("optimizer_update_32bit", &Update32bit);
    m.impl("optimizer_update_8bit_blockwise", &Update8bit);
  }
};

}  // namespace bnb::ops::optim
