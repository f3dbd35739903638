// The optimizer ops on the CPU: bnb/core's updates over torch's thread pool.
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/ops/common/cpu_parallel.h"
#include "bnb/ops/optim/ops.h"

namespace bnb::ops::optim {
namespace {

// An element's update costs about this many times a codec's element (ParallelOverBlocks' `cost`): one thread in
// cache, the 8-bit step ~1.3-1.4 ns, the 32-bit one ~0.4-0.6, a blockwise dequantize ~0.05-0.1. Figures:
// tools/bench/NOTES.md, 'Task grain'.
constexpr int64_t kCost32 = 8, kCost8 = 16;

std::shared_ptr<const core::PreparedCodebook> PrepareCode(const char* op, const char* arg, const at::Tensor& code) {
  auto cb = core::PrepareCodebookCached(code.data_ptr<float>(), code.numel());
  if (!cb.ok()) ThrowIfError(op, absl::Status(cb.status().code(), absl::StrCat(arg, ": ", cb.status().message())));
  return *cb;
}

struct Cpu {
  static constexpr bool kIsMeta = false;

  static void Update32(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                       const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec) {
    const int64_t n = u.n;
    const void* gp = g.data_ptr();
    void* pp = p.data_ptr();
    float* m = state1.data_ptr<float>();
    float* m2 = u.kind.rule == core::OptimRule::kAdEMAMix ? m + n : nullptr;
    float* v = DataOrNull<float>(state2);
    core::OptimStep step = u.step;
    if (u.max_unorm > 0.0) {
      // The update direction's squared norm, summed per task in float64 (before any state changes), the tasks'
      // sums added in the order of their ranges: the same bits from run to run, whichever task ends first.
      std::map<int64_t, double> parts;
      std::mutex mu;
      ParallelOverBlocks(op, n, 1, [&](int64_t i0, int64_t i1) {
        const double part = core::OptimizerUnorm32(step, u.dtype, gp, pp, m, v, i0, i1);
        std::lock_guard<std::mutex> lock(mu);
        parts[i0] = part;
      }, kCost32);
      double sum = 0.0;
      for (const auto& [i0, part] : parts) sum += part;
      // Lion clips by the norm the previous step stored; the others by this step's.
      if (u.kind.rule != core::OptimRule::kLion) unorm_vec->fill_(sum);
      step.clip = core::OptimClip(unorm_vec->reshape({}).item<float>(), u.max_unorm, u.param_norm, u.eps,
                                  !u.kind.two_states);
      if (u.kind.rule == core::OptimRule::kLion) unorm_vec->fill_(sum);
    }
    ParallelOverBlocks(op, n, 1, [&](int64_t i0, int64_t i1) {
      core::OptimizerUpdate32(step, u.dtype, gp, pp, m, m2, v, i0, i1);
    }, kCost32);
  }

  static void Update8(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                      const c10::optional<at::Tensor>& state2, at::Tensor& qmap1,
                      const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
                      const c10::optional<at::Tensor>& absmax2) {
    const auto cb1 = PrepareCode(op, "qmap1", qmap1);
    std::shared_ptr<const core::PreparedCodebook> cb2;
    if (qmap2.has_value()) cb2 = PrepareCode(op, "qmap2", *qmap2);
    const int64_t n = u.n, blocks = core::NumBlocks(n, core::kOptimizerBlocksize);
    const bool ademamix = u.kind.rule == core::OptimRule::kAdEMAMix;
    const void* gp = g.data_ptr();
    void* pp = p.data_ptr();
    uint8_t* q1 = state1.data_ptr<uint8_t>();
    uint8_t* q1b = ademamix ? q1 + n : nullptr;  // ademamix: [m1 codes, m2 codes], [m1 absmax, m2 absmax]
    uint8_t* q2 = DataOrNull<uint8_t>(state2);
    float* am1 = absmax1.data_ptr<float>();
    float* am1b = ademamix ? am1 + blocks : nullptr;
    float* am2 = DataOrNull<float>(absmax2);
    ParallelOverBlocks(op, blocks, core::kOptimizerBlocksize, [&](int64_t b0, int64_t b1) {
      core::OptimizerUpdate8(u.step, u.dtype, gp, pp, q1, q1b, q2, *cb1, cb2.get(), am1, am1b, am2, n, b0, b1);
    }, kCost8);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { Ops<Cpu>::Register(m); }

}  // namespace bnb::ops::optim
