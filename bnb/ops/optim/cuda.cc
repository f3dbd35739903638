// The optimizer ops on CUDA: bnb/jit's NVRTC templates (kernels/optim.cuh) on torch's current stream, over
// contiguous copies written back when a tensor was not contiguous.
#include <c10/core/DeviceGuard.h>

#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/optim.h"
#include "bnb/ops/common/cuda_launch.h"
#include "bnb/ops/optim/ops.h"

namespace bnb::ops::optim {
namespace {

float* FloatsOrNull(const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr<float>() : nullptr; }

struct Cuda {
  static constexpr bool kIsMeta = false;

  static void Update32(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                       const c10::optional<at::Tensor>& state2, const c10::optional<at::Tensor>& unorm_vec) {
    const c10::DeviceGuard guard(p.device());
    const at::Tensor gc = Contiguous(g);
    at::Tensor pc = Contiguous(p), s1 = Contiguous(state1);
    c10::optional<at::Tensor> s2;
    if (state2.has_value()) s2 = Contiguous(*state2);
    const int64_t n = u.n;
    float* m = s1.data_ptr<float>();
    float* m2 = u.kind.rule == core::OptimRule::kAdEMAMix ? m + n : nullptr;
    float* v = FloatsOrNull(s2);
    void* stream = CurrentCudaStream(p);
    const int threads = CudaThreadsPerBlock(op);
    auto& cache = jit::KernelCache::Global();
    const float* unorm = nullptr;
    float limit = 0.0f;
    at::Tensor sum;
    if (u.max_unorm > 0.0) {
      // This step's sum of squares in float64 on the device; lion clips by the previous step's and stores this one
      // after its update, the others store it first and clip by it.
      sum = at::zeros({1}, p.options().dtype(at::kDouble));
      ThrowIfLaunchFailed(op, jit::LaunchOptimizerUnorm32(cache, p.get_device(), u.step, u.dtype, gc.data_ptr(),
                                                          pc.data_ptr(), m, v, n, sum.data_ptr<double>(), stream,
                                                          threads));
      if (u.kind.rule != core::OptimRule::kLion) const_cast<at::Tensor&>(*unorm_vec).copy_(sum.view(unorm_vec->sizes()));
      unorm = unorm_vec->data_ptr<float>();
      limit = static_cast<float>(u.max_unorm * u.param_norm + (u.kind.two_states ? 0.0 : u.eps));
    }
    ThrowIfLaunchFailed(op, jit::LaunchOptimizerUpdate32(cache, p.get_device(), u.step, u.dtype, gc.data_ptr(),
                                                         pc.data_ptr(), m, m2, v, unorm, limit, n, stream, threads));
    if (u.max_unorm > 0.0 && u.kind.rule == core::OptimRule::kLion) {
      const_cast<at::Tensor&>(*unorm_vec).copy_(sum.view(unorm_vec->sizes()));
    }
    WriteBack(p, pc);
    WriteBack(state1, s1);
    if (state2.has_value()) WriteBack(const_cast<at::Tensor&>(*state2), *s2);
  }

  static void Update8(const char* op, const Update& u, at::Tensor& g, at::Tensor& p, at::Tensor& state1,
                      const c10::optional<at::Tensor>& state2, at::Tensor& qmap1,
                      const c10::optional<at::Tensor>& qmap2, at::Tensor& absmax1,
                      const c10::optional<at::Tensor>& absmax2) {
    const c10::DeviceGuard guard(p.device());
    // The qmaps' entries are not checked for finiteness here (the CPU and the reference check them): that would wait
    // for the device on every step. A non-finite qmap gives NaN absmax for the state it codes (and so NaN updates
    // from the next step on), as blockwise8's CUDA quantize does (blockwise8.cuh, bw8::Prepared).
    const at::Tensor gc = Contiguous(g), c1 = Contiguous(qmap1);
    at::Tensor pc = Contiguous(p), s1 = Contiguous(state1), a1 = Contiguous(absmax1);
    c10::optional<at::Tensor> s2, a2, c2;
    if (state2.has_value()) s2 = Contiguous(*state2);
    if (absmax2.has_value()) a2 = Contiguous(*absmax2);
    if (qmap2.has_value()) c2 = Contiguous(*qmap2);
    const int64_t n = u.n, blocks = (n + core::kOptimizerBlocksize - 1) / core::kOptimizerBlocksize;
    const bool ademamix = u.kind.rule == core::OptimRule::kAdEMAMix;
    uint8_t* q1 = s1.data_ptr<uint8_t>();
    float* am1 = a1.data_ptr<float>();
    // The prepared codebooks, from torch's caching allocator on the current stream (freed after the launches, its
    // memory is reused only by work ordered after them).
    at::Tensor scratch = at::empty({jit::OptimizerUpdate8ScratchBytes()}, p.options().dtype(at::kByte));
    ThrowIfLaunchFailed(
        op, jit::LaunchOptimizerUpdate8(jit::KernelCache::Global(), p.get_device(), u.step, u.dtype, gc.data_ptr(),
                                        pc.data_ptr(), q1, ademamix ? q1 + n : nullptr,
                                        s2.has_value() ? s2->data_ptr<uint8_t>() : nullptr, c1.data_ptr<float>(),
                                        FloatsOrNull(c2), am1, ademamix ? am1 + blocks : nullptr, FloatsOrNull(a2),
                                        scratch.data_ptr(), n, CurrentCudaStream(p)));
    WriteBack(p, pc);
    WriteBack(state1, s1);
    WriteBack(absmax1, a1);
    if (state2.has_value()) WriteBack(const_cast<at::Tensor&>(*state2), *s2);
    if (absmax2.has_value()) WriteBack(const_cast<at::Tensor&>(*absmax2), *a2);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CUDA, m) { Ops<Cuda>::Register(m); }

}  // namespace bnb::ops::optim
