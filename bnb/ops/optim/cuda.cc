// The optimizer ops on CUDA: bnb/jit's NVRTC templates (kernels/optim.cuh) on torch's current stream.
#include <c10/core/DeviceGuard.h>

#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/optim.h"
#include "bnb/ops/common/cuda_launch.h"
#include "bnb/ops/optim/ops.h"

namespace bnb::ops::optim {
namespace {

struct Cuda {
  static constexpr bool kIsMeta = false;

  static void Update32(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                       const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec) {
    const c10::DeviceGuard guard(p.device());
    const int64_t n = u.n;
    float* m = state1.data_ptr<float>();
    float* m2 = u.kind.rule == core::OptimRule::kAdEMAMix ? m + n : nullptr;
    float* v = DataOrNull<float>(state2);
    void* stream = CurrentCudaStream(p);
    const int threads = CudaThreadsPerBlock(op);
    auto& cache = jit::KernelCache::Global();
    const float* unorm = nullptr;
    float limit = 0.0f;
    at::Tensor sum;
    if (u.max_unorm > 0.0) {
      // This step's sum of squares in float64 on the device, with no wait for it: lion clips by the previous
      // step's and stores this one after its update; the others store it first and clip by it.
      sum = at::zeros({1}, p.options().dtype(at::kDouble));
      ThrowIfLaunchFailed(op, jit::LaunchOptimizerUnorm32(cache, p.get_device(), u.step, u.dtype, g.data_ptr(),
                                                          p.data_ptr(), m, v, n, sum.data_ptr<double>(), stream,
                                                          threads));
      if (u.kind.rule != core::OptimRule::kLion) unorm_vec->copy_(sum.view(unorm_vec->sizes()));
      unorm = unorm_vec->data_ptr<float>();
      limit = static_cast<float>(u.max_unorm * u.param_norm + (u.kind.two_states ? 0.0 : u.eps));
    }
    ThrowIfLaunchFailed(op, jit::LaunchOptimizerUpdate32(cache, p.get_device(), u.step, u.dtype, g.data_ptr(),
                                                         p.data_ptr(), m, m2, v, unorm, limit, n, stream, threads));
    if (u.max_unorm > 0.0 && u.kind.rule == core::OptimRule::kLion) unorm_vec->copy_(sum.view(unorm_vec->sizes()));
  }

  static void Update8(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                      const c10::optional<at::Tensor>& state2, at::Tensor& qmap1,
                      const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
                      const c10::optional<at::Tensor>& absmax2) {
    const c10::DeviceGuard guard(p.device());
    // The qmaps' entries are not checked for finiteness here (the CPU and the reference check them): that would wait
    // for the device on every step. A non-finite qmap gives NaN absmax for the state it codes (and so NaN updates
    // from the next step on), as blockwise8's CUDA quantize does (blockwise8.cuh, bw8::Prepared).
    const int64_t n = u.n, blocks = (n + core::kOptimizerBlocksize - 1) / core::kOptimizerBlocksize;
    const bool ademamix = u.kind.rule == core::OptimRule::kAdEMAMix;
    uint8_t* q1 = state1.data_ptr<uint8_t>();
    float* am1 = absmax1.data_ptr<float>();
    // The prepared codebooks, from torch's caching allocator on the current stream (freed after the launches, its
    // memory is reused only by work ordered after them).
    at::Tensor scratch = at::empty({jit::OptimizerUpdate8ScratchBytes()}, p.options().dtype(at::kByte));
    ThrowIfLaunchFailed(
        op, jit::LaunchOptimizerUpdate8(jit::KernelCache::Global(), p.get_device(), u.step, u.dtype, g.data_ptr(),
                                        p.data_ptr(), q1, ademamix ? q1 + n : nullptr, DataOrNull<uint8_t>(state2),
                                        qmap1.data_ptr<float>(), DataOrNull<float>(qmap2), am1,
                                        ademamix ? am1 + blocks : nullptr, DataOrNull<float>(absmax2),
                                        scratch.data_ptr(), n, CurrentCudaStream(p), CudaOptim8PerThread(op)));
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CUDA, m) { Ops<Cuda>::Register(m); }

}  // namespace bnb::ops::optim
