// The LLM.int8() ops on the Meta device (and torch.compile's fake tensors): checks and output shapes only. The two
// with data-dependent outputs (the outlier columns) have Python fakes instead (ops.h).
#include "bnb/ops/int8/ops.h"

namespace bnb::ops::int8 {
namespace {

struct Meta {
  static constexpr bool kIsMeta = true;
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, Meta, m) { Ops<Meta>::Register(m); }

}  // namespace bnb::ops::int8
