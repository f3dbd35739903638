// How often each of this library's kernels ran, so tests can tell it served an op (its results equal the reference
// kernels' bit for bit, so the values cannot tell).
#pragma once

namespace bnbdev_kernels {

void CountCall(const char* op);

}  // namespace bnbdev_kernels
