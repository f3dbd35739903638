// The out= ops under torch's Negative dispatch key (an argument that is a negative view, such as
// x.conj().imag). torch's fallback for such views assumes an out= overload returns its out tensors, which these
// (bitsandbytes' schemas, returning ()) do not, and it aborted the process. Here inputs are resolved, and each
// negative-view out is written through a plain temporary, then copied in (copy_ honours the view's sign).
#include "bnb/ops/common/negative_views.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace bnb::ops {
namespace {

void NegativeViewOuts(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (negative-view out, its temporary)
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (!v.isTensor() || !v.toTensor().is_neg()) continue;
    const at::Tensor t = v.toTensor();
    const bool written = args[i].alias_info() != nullptr && args[i].alias_info()->isWrite();
    if (written) {
      at::Tensor tmp = at::empty(t.sizes(), t.options());
      copy_back.emplace_back(t, tmp);
      v = tmp;
    } else {
      v = t.resolve_neg();
    }
  }
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Negative), stack);
  for (auto& [out, tmp] : copy_back) out.copy_(tmp);
}

}  // namespace

void RegisterNegativeViewOuts() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never destroyed: the registrations live as long as the process.
    auto* lib = new torch::Library(torch::Library::IMPL, "bnb", c10::DispatchKey::Negative, __FILE__, __LINE__);
    constexpr const char* kPrefix = "bnb::";
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      if (name.name.rfind(kPrefix, 0) != 0) continue;
      const auto handle = c10::Dispatcher::singleton().findSchema(name);
      if (!handle.has_value()) continue;
      bool writes = false;
      for (const c10::Argument& a : handle->schema().arguments()) {
        writes |= a.alias_info() != nullptr && a.alias_info()->isWrite();
      }
      if (!writes) continue;
      std::string op = name.name.substr(std::char_traits<char>::length(kPrefix));
      if (!name.overload_name.empty()) op += "." + name.overload_name;
      lib->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<&NegativeViewOuts>());
    }
  });
}

}  // namespace bnb::ops
