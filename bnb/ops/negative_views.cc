// The .out overloads under torch's Negative dispatch key (an argument that is a negative view, such as
// x.conj().imag). torch's fallback for such views assumes an out= overload returns its out tensors, which these
// (bitsandbytes' schemas, returning ()) do not, and it aborted the process. Here inputs are resolved, and each
// negative-view out is written through a plain temporary, then copied in (copy_ honours the view's sign).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

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

TORCH_LIBRARY_IMPL(bnb, Negative, m) {
  for (const char* name : {"quantize_blockwise_into", "dequantize_blockwise.out", "dequantize_4bit.out",
                           "gemv_4bit.out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&NegativeViewOuts>());
  }
}

}  // namespace bnb::ops
