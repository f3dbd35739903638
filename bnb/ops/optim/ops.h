// Optimizer update ops (schemas.cc): their argument checks, written once over a backend that supplies the updates
// (see bnb/ops/blockwise8/ops.h for the pattern). The ops write p and the states in place and return nothing, so a
// failed check leaves everything as it was. A backend is a struct of static members:
//
//   struct MyBackend {
//     static constexpr bool kIsMeta = false;  // true: checks only, and none of the functions below
//     // Every tensor argument is contiguous (Ops passes contiguous copies and writes them back). 32-bit states
//     // (float32): `u.step` holds the scalars (bnb/core/optim.h), its clip still 1: the backend applies the trust
//     // ratio where max_unorm > 0 (the reference says how; lion clips by the norm stored before).
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

// The tensors an update writes, each contiguous: the argument itself, or a copy that Finish() writes back into it.
class Contiguous {
 public:
  explicit Contiguous(const at::Tensor& t) : arg_(t), c_(t.is_contiguous() ? t : t.contiguous()) {}
  at::Tensor& get() { return c_; }
  void Finish() {
    if (!c_.is_same(arg_)) arg_.copy_(c_);
  }

 private:
  const at::Tensor& arg_;
  at::Tensor c_;
};

// An optional tensor's contiguous form (Contiguous), or none.
class MaybeContiguous {
 public:
  explicit MaybeContiguous(const c10::optional<at::Tensor>& t) {
    if (t.has_value()) c_.emplace(*t);
  }
  c10::optional<at::Tensor> get() { return c_.has_value() ? c10::optional<at::Tensor>(c_->get()) : c10::nullopt; }
  void Finish() {
    if (c_.has_value()) c_->Finish();
  }

 private:
  c10::optional<Contiguous> c_;
};

// Pointers into a contiguous optional tensor, null where it is absent.
template <class T>
T* DataOrNull(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
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
      Contiguous gc(g), pc(p), s1(state1);
      MaybeContiguous s2(state2);
      Backend::Update32(op, u, gc.get(), pc.get(), s1.get(), s2.get(), unorm_vec);
      pc.Finish();
      s1.Finish();
      s2.Finish();
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
      Contiguous gc(g), pc(p), s1(state1), c1(qmap1), a1(absmax1);
      MaybeContiguous s2(state2), c2(qmap2), a2(absmax2);
      Backend::Update8(op, u, gc.get(), pc.get(), s1.get(), s2.get(), c1.get(), c2.get(), a1.get(), a2.get());
      pc.Finish();
      s1.Finish();
      a1.Finish();
      s2.Finish();
      a2.Finish();
    }
  }

  static void Register(torch::Library& m) {
    m.impl("optimizer_update_32bit", &Update32bit);
    m.impl("optimizer_update_8bit_blockwise", &Update8bit);
  }
};

}  // namespace bnb::ops::optim
