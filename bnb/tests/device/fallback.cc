// Every aten op bnbdev has no kernel for runs on the CPU (at::native::cpu_fallback copies the arguments to the CPU,
// runs the CPU kernel, and copies results and mutated arguments back), except the ops on a deny list, which fail
// naming the op: the fallback would give them the CPU's behaviour where the device's own is wanted. By default that is
// random numbers (bnbdev has no generator: through the fallback they would come from the CPU's); tests add others
// with torch.ops.bnbdev.deny_fallback.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "bnb/tests/device/device.h"

namespace bnbdev {
namespace {

std::mutex mu;
std::set<std::string> denied = {"aten::bernoulli_.float", "aten::normal_", "aten::random_", "aten::random_.from",
                                "aten::random_.to", "aten::uniform_"};

std::string Name(const c10::OperatorName& op) {
  return op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
}

bool IsDenied(const c10::OperatorName& op) {
  std::lock_guard<std::mutex> lock(mu);
  return denied.count(op.name) > 0 || denied.count(Name(op)) > 0;
}

void Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  TORCH_CHECK_NOT_IMPLEMENTED(!IsDenied(name), "bnbdev: ", Name(name),
                              " has no bnbdev kernel and is on the deny list of bnbdev's CPU fallback");
  at::native::cpu_fallback(op, stack);
}

}  // namespace

void SetFallbackDenied(const std::string& op, bool deny) {
  TORCH_CHECK(op.rfind("aten::", 0) == 0, "bnbdev: deny_fallback takes an aten op ('aten::name[.overload]'), got '",
              op, "'");
  std::lock_guard<std::mutex> lock(mu);
  if (deny) {
    denied.insert(op);
  } else {
    denied.erase(op);
  }
}

std::vector<std::string> FallbackDenied() {
  std::lock_guard<std::mutex> lock(mu);
  return {denied.begin(), denied.end()};
}

}  // namespace bnbdev

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&bnbdev::Fallback>()); }
