// Host side of kernels/optim.cuh: the kernel specs and launches of the optimizer updates on CUDA. Pointers are device
// pointers (contiguous); `stream` is the runtime's stream handle as void*; `threads` is the cuda.threads_per_block
// knob's value (0: its default; the 8-bit update always runs 256, per_thread elements each). Results equal
// bnb/core/optim.h's CPU updates bit for bit (the trust ratio's float64 sum aside, which adds in another order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/core/dtype.h"
#include "bnb/core/knobs.h"
#include "bnb/core/optim.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::opt {
struct Scalars;  // kernels/optim_scalars.cuh
}  // namespace bnb::opt

namespace bnb::jit {

// The kernels' scalars (kernels/optim_scalars.cuh) for one step; clip_limit: the 32-bit update's trust-ratio limit.
opt::Scalars OptimKernelScalars(const core::OptimStep& step, float clip_limit);

// optimizer_update32 / optimizer_unorm32 / optimizer_update8 for `rule` and p's type; per_thread and whole:
// optimizer_update8's elements a thread (the cuda.optim8_per_thread knob: 1, 2, 4 or 8) and its WHOLE variant
// (PlanUpdate8), which the others ignore.
absl::StatusOr<KernelSpec> OptimSpec(const std::string& entry, core::OptimRule rule, core::DType dtype, int threads,
                                     const std::string& arch, int per_thread = core::kCudaOptim8PerThreadDefault,
                                     bool whole = false);

// Every optimizer spec; registered as the optim family (kernel_registry.h). optimizer_update8's take the
// cuda.optim8_per_thread knob's current value, as the ops do.
std::vector<KernelSpec> AllOptimSpecs(const std::string& arch, int threads = 0);

// 32-bit states: elements [0, n) of g and p (dtype) and the float32 states (s1b: ademamix's m2; s2: two-state rules;
// else null). unorm: the trust ratio's sum of squares (one float32) when clipping, with clip_limit =
// f32(max_unorm * param_norm (+ eps for one-state rules)); null for no clipping.
absl::Status LaunchOptimizerUpdate32(KernelCache& cache, int device, const core::OptimStep& step, core::DType dtype,
                                     const void* g, void* p, float* s1, float* s1b, float* s2, const float* unorm,
                                     float clip_limit, int64_t n, void* stream, int threads = 0);

// Adds the update direction's sum of squares (bnb::core::OptimizerUnorm32) to *sum (one float64, on the device).
absl::Status LaunchOptimizerUnorm32(KernelCache& cache, int device, const core::OptimStep& step, core::DType dtype,
                                    const void* g, const void* p, const float* s1, const float* s2, int64_t n,
                                    double* sum, void* stream, int threads = 0);

// Whether per_thread elements of dtype are whole 16-byte vectors (optimizer_update8's WHOLE variant needs them).
bool Update8VectorShares(core::DType dtype, int per_thread);

// How LaunchOptimizerUpdate8 covers n elements: the first `whole` (whole state blocks, every buffer aligned for
// 16-byte vectors) by optimizer_update8's WHOLE variant, whose fewer registers let more CTAs share an SM; the
// `rest` after them (a partial last block; everything where a buffer is misaligned or per_thread too small for
// whole vectors) by the general one. Null buffers count as aligned.
struct Update8Plan {
  int64_t whole;
  int64_t rest;
};
Update8Plan PlanUpdate8(core::DType dtype, int per_thread, int64_t n, const void* g, const void* p, const uint8_t* q1,
                        const uint8_t* q1b, const uint8_t* q2);

// Device bytes LaunchOptimizerUpdate8 needs for its prepared codebooks (two of kQuantizeBlockwise8ScratchBytes).
int64_t OptimizerUpdate8ScratchBytes();

// 8-bit blockwise states (blocks of 256): codes q1 (q1b: ademamix's m2, else null) with codebook qmap1 and absmax
// am1 (am1b), and for two-state rules q2 with qmap2 and am2 (else null); qmaps: 256 finite floats. scratch:
// OptimizerUpdate8ScratchBytes(), 16-byte aligned, free for the launches' use on `stream`.
absl::Status LaunchOptimizerUpdate8(KernelCache& cache, int device, const core::OptimStep& step, core::DType dtype,
                                    const void* g, void* p, uint8_t* q1, uint8_t* q1b, uint8_t* q2,
                                    const float* qmap1, const float* qmap2, float* am1, float* am1b, float* am2,
                                    void* scratch, int64_t n, void* stream,
                                    int per_thread = core::kCudaOptim8PerThreadDefault);

}  // namespace bnb::jit
