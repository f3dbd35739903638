// bnb's optimizer ops on bnbdev, out of bnb's tree: bnb/ops/optim/ops.h gives the checks, one step's scalars and
// contiguous tensors, this Backend the updates: bnb/core's CPU ones on one thread (bnbdev's memory is host memory).
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/optim.h"
#include "bnb/ops/optim/ops.h"
#include "bnb/tests/device/kernels/calls.h"

namespace bnbdev_kernels {
namespace {

namespace core = bnb::core;
using bnb::ops::optim::DataOrNull;
using bnb::ops::optim::Update;

const core::PreparedCodebook& Codebook(const char* op, const at::Tensor& code,
                                       std::shared_ptr<const core::PreparedCodebook>& keep) {
  auto cb = core::PrepareCodebookCached(code.data_ptr<float>(), code.numel());
  bnb::ops::ThrowIfError(op, cb.status());
  keep = *cb;
  return *keep;
}

struct Bnbdev {
  static constexpr bool kIsMeta = false;

  static void Update32(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                       const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec) {
    CountCall(op);
    float* m = state1.data_ptr<float>();
    float* v = DataOrNull<float>(state2);
    core::OptimStep step = u.step;
    if (u.max_unorm > 0.0) {  // lion clips by the stored norm, the others by this step's
      const double sum = core::OptimizerUnorm32(step, u.dtype, g.data_ptr(), p.data_ptr(), m, v, 0, u.n);
      float* stored = unorm_vec->data_ptr<float>();
      if (u.kind.rule != core::OptimRule::kLion) *stored = static_cast<float>(sum);
      step.clip = core::OptimClip(*stored, u.max_unorm, u.param_norm, u.eps, !u.kind.two_states);
      *stored = static_cast<float>(sum);
    }
    core::OptimizerUpdate32(step, u.dtype, g.data_ptr(), p.data_ptr(), m,
                            u.kind.rule == core::OptimRule::kAdEMAMix ? m + u.n : nullptr, v, 0, u.n);
  }

  static void Update8(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                      const c10::optional<at::Tensor>& state2, at::Tensor& qmap1,
                      const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
                      const c10::optional<at::Tensor>& absmax2) {
    CountCall(op);
    std::shared_ptr<const core::PreparedCodebook> keep1, keep2;
    const core::PreparedCodebook& cb1 = Codebook(op, qmap1, keep1);
    const core::PreparedCodebook* cb2 = qmap2.has_value() ? &Codebook(op, *qmap2, keep2) : nullptr;
    const int64_t n = u.n, blocks = core::NumBlocks(n, core::kOptimizerBlocksize);
    const bool ademamix = u.kind.rule == core::OptimRule::kAdEMAMix;
    uint8_t* q1 = state1.data_ptr<uint8_t>();
    float* am1 = absmax1.data_ptr<float>();
    core::OptimizerUpdate8(u.step, u.dtype, g.data_ptr(), p.data_ptr(), q1, ademamix ? q1 + n : nullptr,
                           DataOrNull<uint8_t>(state2), cb1, cb2, am1, ademamix ? am1 + blocks : nullptr,
                           DataOrNull<float>(absmax2), n, 0, blocks);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, PrivateUse1, m) { bnb::ops::optim::Ops<Bnbdev>::Register(m); }

}  // namespace bnbdev_kernels
