// The blockwise 8-bit ops on the Meta device (and torch.compile's fake tensors): checks and output shapes only.
#include "bnb/ops/blockwise8/ops.h"

namespace bnb::ops::blockwise8 {
namespace {

struct Meta {
  static constexpr bool kIsMeta = true;
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, Meta, m) { Ops<Meta>::Register(m); }

}  // namespace bnb::ops::blockwise8
