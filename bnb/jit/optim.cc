#include "bnb/jit/optim.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bnb/core/config.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/launch.h"
#include "bnb/jit/launch_shape.h"
#include "bnb/jit/optim_scalars_host.h"
#include "bnb/jit/threads_per_block.h"

namespace bnb::jit {
namespace {

constexpr const char* kUpdate32 = "optimizer_update32";
constexpr const char* kUnorm32 = "optimizer_unorm32";
constexpr const char* kUpdate8 = "optimizer_update8";
constexpr int kUpdate8Threads = 256;  // a CTA: 256 / per_thread threads a state block
constexpr core::DType kTypes[] = {core::DType::kFloat32, core::DType::kFloat16, core::DType::kBFloat16};
constexpr core::OptimRule kRules[] = {core::OptimRule::kAdam,     core::OptimRule::kAdEMAMix,
                                      core::OptimRule::kMomentum, core::OptimRule::kLion,
                                      core::OptimRule::kRMSprop,  core::OptimRule::kAdagrad};

// The template's name for a rule (kernels/optim.cuh's bnb::opt::Rule).
const char* RuleName(core::OptimRule rule) {
  switch (rule) {
    case core::OptimRule::kAdam: return "bnb::opt::kAdam";
    case core::OptimRule::kAdEMAMix: return "bnb::opt::kAdEMAMix";
    case core::OptimRule::kMomentum: return "bnb::opt::kMomentum";
    case core::OptimRule::kLion: return "bnb::opt::kLion";
    case core::OptimRule::kRMSprop: return "bnb::opt::kRMSprop";
    case core::OptimRule::kAdagrad: return "bnb::opt::kAdagrad";
  }
  return "?";
}

}  // namespace

opt::Scalars OptimKernelScalars(const core::OptimStep& s, float clip_limit) {
  opt::Scalars k{};
  k.gnorm_scale = s.gnorm_scale;
  k.decay = s.decay;
  k.weight_decay = s.weight_decay;
  k.b1 = s.b1;
  k.b2 = s.b2;
  k.b3 = s.b3;
  k.one_minus_b1 = s.one_minus_b1;
  k.one_minus_b2 = s.one_minus_b2;
  k.one_minus_b3 = s.one_minus_b3;
  k.lr = s.lr;
  k.neg_lr = s.neg_lr;
  k.eps = s.eps;
  k.alpha = s.alpha;
  k.adam_step_size = s.adam_step_size;
  k.adam_eps_c2 = s.adam_eps_c2;
  k.adam_neg_lr_c1 = s.adam_neg_lr_c1;
  k.c1 = s.c1;
  k.c2 = s.c2;
  k.inv_c1 = s.inv_c1;
  k.inv_c2_squared = s.inv_c2_squared;
  k.clip_limit = clip_limit;
  k.skip_zeros = s.skip_zeros;
  k.first_step = s.first_step;
  k.decoupled_decay = s.decoupled_decay;
  k.coupled_decay = s.coupled_decay;
  return k;
}

namespace {

absl::StatusOr<LoadedKernel> Get(KernelCache& cache, int device, const char* entry, core::OptimRule rule,
                                 core::DType dtype, int threads) {
  absl::StatusOr<KernelSpec> spec = OptimSpec(entry, rule, dtype, threads, "");
  if (!spec.ok()) return spec.status();
  return cache.GetKernel(*spec, device);
}

}  // namespace

absl::StatusOr<KernelSpec> OptimSpec(const std::string& entry, core::OptimRule rule, core::DType dtype, int threads,
                                     const std::string& arch, int per_thread, bool whole) {
  if (entry == kUpdate8) {
    threads = kUpdate8Threads;
    if (!core::IsOptim8PerThread(per_thread)) {
      return absl::InvalidArgumentError(
          absl::StrCat("optim: optimizer_update8 takes 1, 2, 4 or 8 elements a thread, got ", per_thread));
    }
    if (whole && !Update8VectorShares(dtype, per_thread)) {
      return absl::InvalidArgumentError(absl::StrCat("optim: optimizer_update8's whole-block variant needs ",
                                                     per_thread, " elements a thread to be whole 16-byte vectors of ",
                                                     core::DTypeName(dtype)));
    }
  } else if (entry == kUpdate32 || entry == kUnorm32) {
    threads = ThreadsPerBlock(threads);
    if (absl::Status st = CheckThreadsPerBlock("optim", threads); !st.ok()) return st;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("optim: no kernel '", entry, "' in kernels/optim.cuh"));
  }
  KernelSpec s;
  s.template_name = "optim";
  s.entry = entry;
  s.template_args = {{"T", CudaTypeName(dtype)}, {"RULE", RuleName(rule)}, {"THREADS", absl::StrCat(threads)}};
  if (entry == kUpdate8) {
    s.template_args.push_back({"PER", absl::StrCat(per_thread)});
    s.template_args.push_back({"WHOLE", whole ? "true" : "false"});
  }
  s.arch = arch;
  return s;
}

std::vector<KernelSpec> AllOptimSpecs(const std::string& arch, int threads) {
  // The 8-bit update's as a run with this configuration loads them (a bad setting: the default, as the knob's
  // readers warn and fall back).
  const absl::StatusOr<int64_t> knob = core::Config::Global().GetInt("cuda.optim8_per_thread");
  const int per_thread = knob.ok() ? static_cast<int>(*knob) : core::kCudaOptim8PerThreadDefault;
  std::vector<KernelSpec> out;
  for (core::DType t : kTypes) {
    for (core::OptimRule rule : kRules) {
      out.push_back(*OptimSpec(kUpdate32, rule, t, threads, arch));
      out.push_back(*OptimSpec(kUpdate8, rule, t, threads, arch, per_thread));
      if (Update8VectorShares(t, per_thread)) {
        out.push_back(*OptimSpec(kUpdate8, rule, t, threads, arch, per_thread, true));
      }
      if (rule != core::OptimRule::kAdEMAMix) out.push_back(*OptimSpec(kUnorm32, rule, t, threads, arch));
    }
  }
  return out;
}

BNB_REGISTER_KERNEL_FAMILY(optim, AllOptimSpecs);

absl::Status LaunchOptimizerUpdate32(KernelCache& cache, int device, const core::OptimStep& step, core::DType dtype,
                                     const void* g, void* p, float* s1, float* s1b, float* s2, const float* unorm,
                                     float clip_limit, int64_t n, void* stream, int threads) {
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<LoadedKernel> k = Get(cache, device, kUpdate32, step.rule, dtype, threads);
  if (!k.ok()) return k.status();
  const int t = ThreadsPerBlock(threads);
  return Launch(*k, ElementGrid(n, t), Dim3{static_cast<unsigned>(t)}, 0, stream, g, p, s1, s1b, s2, unorm,
                OptimKernelScalars(step, clip_limit), static_cast<long long>(n));
}

absl::Status LaunchOptimizerUnorm32(KernelCache& cache, int device, const core::OptimStep& step, core::DType dtype,
                                    const void* g, const void* p, const float* s1, const float* s2, int64_t n,
                                    double* sum, void* stream, int threads) {
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<LoadedKernel> k = Get(cache, device, kUnorm32, step.rule, dtype, threads);
  if (!k.ok()) return k.status();
  const int t = ThreadsPerBlock(threads);
  // Fewer CTAs than elements / threads: each adds a longer run, and fewer float64 atomics meet at *sum.
  const Dim3 grid{static_cast<unsigned>(std::clamp<int64_t>((n + 8 * t - 1) / (8 * t), 1, 4096))};
  return Launch(*k, grid, Dim3{static_cast<unsigned>(t)}, 0, stream, g, p, s1, s2, OptimKernelScalars(step, 0.0f),
                static_cast<long long>(n), sum);
}

int64_t OptimizerUpdate8ScratchBytes() { return 2 * kQuantizeBlockwise8ScratchBytes; }

bool Update8VectorShares(core::DType dtype, int per_thread) {
  return per_thread % (16 / core::DTypeSize(dtype)) == 0;
}

Update8Plan PlanUpdate8(core::DType dtype, int per_thread, int64_t n, const void* g, const void* p, const uint8_t* q1,
                        const uint8_t* q1b, const uint8_t* q2) {
  const int64_t vec = 16 / core::DTypeSize(dtype);  // elements a 16-byte vector; a share's codes align to as many
  const auto aligned = [](const void* ptr, int64_t a) {
    return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(a) == 0;
  };
  const bool fit = Update8VectorShares(dtype, per_thread) && aligned(g, 16) && aligned(p, 16) && aligned(q1, vec) &&
                   aligned(q1b, vec) && aligned(q2, vec);
  const int64_t whole = fit ? n / core::kOptimizerBlocksize * core::kOptimizerBlocksize : 0;
  return Update8Plan{whole, n - whole};
}

absl::Status LaunchOptimizerUpdate8(KernelCache& cache, int device, const core::OptimStep& step, core::DType dtype,
                                    const void* g, void* p, uint8_t* q1, uint8_t* q1b, uint8_t* q2,
                                    const float* qmap1, const float* qmap2, float* am1, float* am1b, float* am2,
                                    void* scratch, int64_t n, void* stream, int per_thread) {
  if (n == 0) return absl::OkStatus();
  const Update8Plan plan = PlanUpdate8(dtype, per_thread, n, g, p, q1, q1b, q2);
  absl::StatusOr<KernelSpec> whole_spec = OptimSpec(kUpdate8, step.rule, dtype, 0, "", per_thread, true);
  absl::StatusOr<KernelSpec> rest_spec = OptimSpec(kUpdate8, step.rule, dtype, 0, "", per_thread, false);
  if (plan.whole > 0 && !whole_spec.ok()) return whole_spec.status();
  if (!rest_spec.ok()) return rest_spec.status();
  // Both kernels compiled and loaded before anything launches, so that a failure leaves p and the states as they
  // were (the cache hands them to the launches below).
  for (const auto& [count, spec] : {std::pair<int64_t, const absl::StatusOr<KernelSpec>*>{plan.whole, &whole_spec},
                                    {plan.rest, &rest_spec}}) {
    if (count == 0) continue;
    if (absl::StatusOr<LoadedKernel> k = cache.GetKernel(**spec, device); !k.ok()) return k.status();
  }
  absl::StatusOr<LoadedKernel> prepare = cache.GetKernel(PrepareCodebook8Spec(""), device);
  if (!prepare.ok()) return prepare.status();
  char* prep1 = static_cast<char*>(scratch);
  char* prep2 = qmap2 != nullptr ? prep1 + kQuantizeBlockwise8ScratchBytes : nullptr;
  for (const auto& [qmap, prep] : {std::pair<const float*, char*>{qmap1, prep1}, {qmap2, prep2}}) {
    if (qmap == nullptr) continue;
    if (absl::Status st = Launch(*prepare, Dim3{1}, Dim3{kPrepareCodebook8Threads}, 0, stream, qmap,
                                 static_cast<void*>(prep));
        !st.ok()) {
      return st;
    }
  }
  // The whole blocks, then the rest from where they end (every buffer advanced by as many elements and blocks).
  const opt::Scalars scalars = OptimKernelScalars(step, 0.0f);
  const auto part = [&](const KernelSpec& spec, int64_t from, int64_t count) {
    const int64_t size = core::DTypeSize(dtype), blocks = from / core::kOptimizerBlocksize;
    const auto at = [from](uint8_t* q) { return q != nullptr ? q + from : nullptr; };
    const auto block_at = [blocks](float* a) { return a != nullptr ? a + blocks : nullptr; };
    return LaunchOverBlockTiles(cache, device, spec, count, core::kOptimizerBlocksize, kUpdate8Threads, per_thread,
                                stream, static_cast<const void*>(static_cast<const char*>(g) + from * size),
                                static_cast<void*>(static_cast<char*>(p) + from * size), at(q1), at(q1b), at(q2),
                                static_cast<const void*>(prep1), static_cast<const void*>(prep2), qmap1, qmap2,
                                block_at(am1), block_at(am1b), block_at(am2), scalars,
                                static_cast<long long>(count));
  };
  if (plan.whole > 0) {
    if (absl::Status st = part(*whole_spec, 0, plan.whole); !st.ok()) return st;
  }
  if (plan.rest > 0) return part(*rest_spec, plan.whole, plan.rest);
  return absl::OkStatus();
}

}  // namespace bnb::jit
