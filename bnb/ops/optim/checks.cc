// The optimizer ops' argument checks (ops.h), as the reference (bnb/python/bnb/reference/optim.py) words them.
#include "absl/strings/str_cat.h"
#include "bnb/ops/optim/ops.h"

namespace bnb::ops::optim {

core::OptimKind CheckCommon(const char* op, c10::string_view name, const at::Tensor& g, const at::Tensor& p,
                            const at::Tensor& state1, const c10::optional<at::Tensor>& state2, bool eight_bit,
                            int64_t step) {
  absl::StatusOr<core::OptimKind> kind = core::ParseOptimizer(std::string(name));
  ThrowIfError(op, kind.status());
  FloatDType(op, "p", p.scalar_type());
  TORCH_CHECK(g.scalar_type() == p.scalar_type(), "bnb::", op, ": g must have p's dtype ", DTypeName{p.scalar_type()},
              ", got ", DTypeName{g.scalar_type()});
  TORCH_CHECK(g.sym_numel() == p.sym_numel(), "bnb::", op, ": g must have p's ", p.sym_numel(), " elements, got ",
              g.sym_numel());
  CheckSameDevice(op, "g", g, p, "p");
  const bool ademamix = kind->rule == core::OptimRule::kAdEMAMix;
  const c10::SymInt want = ademamix ? 2 * p.sym_numel() : p.sym_numel();
  const c10::ScalarType state_type = eight_bit ? at::kByte : at::kFloat;
  CheckDType(op, "state1", state1, state_type);
  TORCH_CHECK(state1.sym_numel() == want, "bnb::", op, ": state1 must hold ", want, " values",
              ademamix ? " (two per parameter: ademamix)" : "", ", got ", state1.sym_numel());
  CheckSameDevice(op, "state1", state1, p, "p");
  if (kind->two_states) {
    TORCH_CHECK(state2.has_value(), "bnb::", op, ": ", name, " needs state2");
    CheckDType(op, "state2", *state2, state_type);
    TORCH_CHECK(state2->sym_numel() == p.sym_numel(), "bnb::", op, ": state2 must hold ", p.sym_numel(),
                " values, got ", state2->sym_numel());
    CheckSameDevice(op, "state2", *state2, p, "p");
  } else {
    TORCH_CHECK(!state2.has_value(), "bnb::", op, ": ", name, " keeps one state; state2 must be None");
  }
  TORCH_CHECK(step >= 1, "bnb::", op, ": step counts from 1, got ", step);
  return *kind;
}

void CheckUnorm(const char* op, const core::OptimKind& kind, c10::string_view name, double max_unorm,
                const c10::optional<at::Tensor>& unorm_vec, const at::Tensor& p) {
  if (!(max_unorm > 0.0)) return;
  TORCH_CHECK(kind.rule != core::OptimRule::kAdEMAMix, "bnb::", op,
              ": max_unorm (update-norm clipping) is not defined for ademamix");
  TORCH_CHECK(unorm_vec.has_value() && unorm_vec->scalar_type() == at::kFloat && unorm_vec->sym_numel() == 1, "bnb::",
              op, ": max_unorm > 0 needs unorm_vec, one float32 value");
  CheckSameDevice(op, "unorm_vec", *unorm_vec, p, "p");
}

void CheckCodebooks(const char* op, const core::OptimKind& kind, c10::string_view name, const at::Tensor& p,
                    const at::Tensor& qmap1, const c10::optional<at::Tensor>& qmap2, const at::Tensor& absmax1,
                    const c10::optional<at::Tensor>& absmax2) {
  const c10::SymInt blocks = NumBlocks(p.sym_numel(), core::kOptimizerBlocksize);
  const int64_t halves = kind.rule == core::OptimRule::kAdEMAMix ? 2 : 1;
  const auto float32 = [&](const char* arg, const at::Tensor& t, const c10::SymInt& count, const char* why) {
    CheckDType(op, arg, t, at::kFloat);
    CheckNumel(op, arg, t, count, why);
    CheckSameDevice(op, arg, t, p, "p");
  };
  float32("qmap1", qmap1, 256, "one value per 8-bit code");
  float32("absmax1", absmax1, halves * blocks, "one per block of 256 of each state");
  if (kind.two_states) {
    TORCH_CHECK(qmap2.has_value() && absmax2.has_value(), "bnb::", op, ": ", name, " needs qmap2 and absmax2");
    float32("qmap2", *qmap2, 256, "one value per 8-bit code");
    float32("absmax2", *absmax2, blocks, "one per block of 256");
  }
}

}  // namespace bnb::ops::optim
