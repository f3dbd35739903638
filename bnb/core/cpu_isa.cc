#include "bnb/core/cpu_isa.h"

#include <atomic>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/cpu_isa.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
int64_t DispatchedTarget() { return HWY_TARGET; }
}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {
namespace {

HWY_EXPORT(DispatchedTarget);

std::string LowerName(int64_t target) { return absl::AsciiStrToLower(hwy::TargetName(target)); }

// Compiled and supported targets, best (lowest bit) first, ignoring any cap.
std::vector<int64_t> UncappedTargets() {
  static const std::vector<int64_t> targets = [] {
    hwy::DisableTargets(0);
    std::vector<int64_t> out;
    for (int64_t t = hwy::SupportedTargets() & HWY_TARGETS; t != 0; t &= t - 1) out.push_back(t & ~(t - 1));
    return out;
  }();
  return targets;
}

std::mutex& CapMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::vector<std::string> AvailableIsas() {
  std::vector<std::string> names;
  for (int64_t t : UncappedTargets()) names.push_back(LowerName(t));
  return names;
}

std::vector<std::string> CompiledIsas() {
  std::vector<std::string> names;
  for (int64_t t = HWY_TARGETS; t != 0; t &= t - 1) names.push_back(LowerName(t & ~(t - 1)));
  return names;
}

std::string ActiveIsa() { return LowerName(ActiveTarget()); }

int64_t ActiveTarget() { return HWY_DYNAMIC_DISPATCH(DispatchedTarget)(); }

namespace {

// Targets better than the cap `name`. Any target compiled in is accepted, supported here or not, so one config
// file serves several machines.
absl::StatusOr<int64_t> DisabledBy(absl::string_view name) {
  if (name == "best") return int64_t{0};
  int64_t disabled = 0;
  std::vector<std::string> names;
  for (int64_t t = HWY_TARGETS; t != 0; t &= t - 1) {
    const int64_t bit = t & ~(t - 1);
    names.push_back(LowerName(bit));
    if (names.back() == name) return disabled;
    disabled |= bit;
  }
  return absl::InvalidArgumentError(absl::StrCat("cpu.isa: '", name, "' is not an instruction set compiled into ",
                                                 "bnb; expected one of: best, ", absl::StrJoin(names, ", ")));
}

}  // namespace

absl::Status ValidateIsaName(absl::string_view name) { return DisabledBy(name).status(); }

absl::Status SetIsaCap(absl::string_view name) {
  UncappedTargets();  // records the processor's targets before any cap hides them
  absl::StatusOr<int64_t> disabled = DisabledBy(name);
  if (!disabled.ok()) return disabled.status();
  std::lock_guard<std::mutex> lock(CapMutex());
  hwy::DisableTargets(*disabled);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return absl::OkStatus();
}

namespace {
std::atomic<bool> amx_allowed{true};
}  // namespace

bool CpuIsIntel() {
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
}

void SetAmxAllowed(bool allowed) { amx_allowed.store(allowed, std::memory_order_relaxed); }
bool AmxAllowed() { return amx_allowed.load(std::memory_order_relaxed); }

}  // namespace bnb::core
#endif  // HWY_ONCE
