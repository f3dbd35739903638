// bnb's optimizer ops on bnbdev, out of bnb's tree: bnb/ops/optim/ops.h gives the checks and one step's scalars,
// this Backend the updates: bnb/core's CPU ones on one thread (bnbdev's memory is host memory).
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/optim.h"
#include "bnb/ops/optim/ops.h"
#include "bnb/tests/device/kernels/calls.h"

namespace bnbdev_kernels {
namespace {

namespace core = bnb::core;
using bnb::ops::optim::Contiguous;
using bnb::ops::optim::Update;
using bnb::ops::optim::WriteBack;

float* FloatsOrNull(const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr<float>() : nullptr; }

std::shared_ptr<const core::PreparedCodebook> Codebook(const char* op, const at::Tensor& code) {
  const at::Tensor c = code.contiguous();
  auto cb = core::PrepareCodebookCached(c.data_ptr<float>(), c.numel());
  bnb::ops::ThrowIfError(op, cb.status());
  return *cb;
}

struct Bnbdev {
  static constexpr bool kIsMeta = false;

  static void Update32(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                       const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec) {
    CountCall(op);
    const at::Tensor gc = Contiguous(g);
    at::Tensor pc = Contiguous(p), s1 = Contiguous(state1);
    c10::optional<at::Tensor> s2;
    if (state2.has_value()) s2 = Contiguous(*state2);
    float* m = s1.data_ptr<float>();
    float* v = FloatsOrNull(s2);
    core::OptimStep step = u.step;
    if (u.max_unorm > 0.0) {  // lion clips by the stored norm, the others by this step's
      const double sum = core::OptimizerUnorm32(step, u.dtype, gc.data_ptr(), pc.data_ptr(), m, v, 0, u.n);
      float* stored = unorm_vec->data_ptr<float>();
      if (u.kind.rule != core::OptimRule::kLion) *stored = static_cast<float>(sum);
      step.clip = core::OptimClip(*stored, u.max_unorm, u.param_norm, u.eps, !u.kind.two_states);
      *stored = static_cast<float>(sum);
    }
    core::OptimizerUpdate32(step, u.dtype, gc.data_ptr(), pc.data_ptr(), m,
                            u.kind.rule == core::OptimRule::kAdEMAMix ? m + u.n : nullptr, v, 0, u.n);
    WriteBack(p, pc);
    WriteBack(state1, s1);
    if (state2.has_value()) WriteBack(const_cast<at::Tensor&>(*state2), *s2);
  }

  static void Update8(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                      const c10::optional<at::Tensor>& state2, at::Tensor& qmap1,
                      const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
                      const c10::optional<at::Tensor>& absmax2) {
    CountCall(op);
    const auto cb1 = Codebook(op, qmap1);
    std::shared_ptr<const core::PreparedCodebook> cb2;
    if (qmap2.has_value()) cb2 = Codebook(op, *qmap2);
    const at::Tensor gc = Contiguous(g);
    at::Tensor pc = Contiguous(p), s1 = Contiguous(state1), a1 = Contiguous(absmax1);
    c10::optional<at::Tensor> s2, a2;
    if (state2.has_value()) s2 = Contiguous(*state2);
    if (absmax2.has_value()) a2 = Contiguous(*absmax2);
    const int64_t n = u.n, blocks = core::NumBlocks(n, core::kOptimizerBlocksize);
    const bool ademamix = u.kind.rule == core::OptimRule::kAdEMAMix;
    uint8_t* q1 = s1.data_ptr<uint8_t>();
    float* am1 = a1.data_ptr<float>();
    core::OptimizerUpdate8(u.step, u.dtype, gc.data_ptr(), pc.data_ptr(), q1, ademamix ? q1 + n : nullptr,
                           s2.has_value() ? s2->data_ptr<uint8_t>() : nullptr, *cb1, cb2.get(), am1,
                           ademamix ? am1 + blocks : nullptr, FloatsOrNull(a2), n, 0, blocks);
    WriteBack(p, pc);
    WriteBack(state1, s1);
    WriteBack(absmax1, a1);
    if (state2.has_value()) WriteBack(const_cast<at::Tensor&>(*state2), *s2);
    if (absmax2.has_value()) WriteBack(const_cast<at::Tensor&>(*absmax2), *a2);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, PrivateUse1, m) { bnb::ops::optim::Ops<Bnbdev>::Register(m); }

}  // namespace bnbdev_kernels
