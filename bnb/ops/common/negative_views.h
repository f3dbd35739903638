// Writes into negative views (x.conj().imag) by every bnb op with out= arguments.
#pragma once

namespace bnb::ops {

// Registers, under torch's Negative dispatch key, a boxed kernel for every bnb op whose schema writes an argument
// (derived from the schemas, so a new family's out= ops are covered without a list). Call once all schemas are
// defined (bnb._C's module init); later calls do nothing.
void RegisterNegativeViewOuts();

}  // namespace bnb::ops
