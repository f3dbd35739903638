// The optimizer ops on the Meta device (and torch.compile's fake tensors): the checks (they write in place and
// return nothing).
#include "bnb/ops/optim/ops.h"

namespace bnb::ops::optim {
namespace {

struct Meta {
  static constexpr bool kIsMeta = true;
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, Meta, m) { Ops<Meta>::Register(m); }

}  // namespace bnb::ops::optim
