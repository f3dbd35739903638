// Argument checks shared by the op families: each failure is a c10::Error naming the op, the argument, the value
// and what was expected.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <ostream>

#include "absl/status/status.h"
#include "bnb/core/dtype.h"

namespace bnb::ops {

// Raises with the op's name and the status' message when `st` is not OK.
inline void ThrowIfError(const char* op, const absl::Status& st) {
  TORCH_CHECK(st.ok(), "bnb::", op, ": ", std::string(st.message()));
}

// A dtype as Python users spell it (float32, uint8, int8), not c10's names (Float, Byte, Char), for messages.
struct DTypeName {
  c10::ScalarType type;
};
std::ostream& operator<<(std::ostream& os, DTypeName name);

// float32 / float16 / bfloat16 -> the core's element type; anything else raises naming `arg`.
bnb::core::DType FloatDType(const char* op, const char* arg, c10::ScalarType t);

// The product of user-given sizes (a shape argument such as shapeB): every product of sizes a user names goes
// through here, so a negative size or one past 2^63 elements is an error naming `arg`, never a wrapped count.
int64_t CheckedNumel(const char* op, const char* arg, at::IntArrayRef sizes);

void CheckDType(const char* op, const char* arg, const at::Tensor& t, c10::ScalarType want);
void CheckNotEmpty(const char* op, const char* arg, const at::Tensor& t);
// t on ref's device; ref_name names ref in the error (the op's main tensor: A, or p for the optimizers).
void CheckSameDevice(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& ref,
                     const char* ref_name = "A");
// Blocks of `blocksize` covering n elements, on symbolic sizes (bnb::core::NumBlocks for the Meta kernels).
inline c10::SymInt NumBlocks(const c10::SymInt& n, int64_t blocksize) { return (n + blocksize - 1) / blocksize; }

// Sizes are SymInts so that Meta kernels work under torch.compile's dynamic shapes (a check becomes a guard).
void CheckNumel(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& want, const char* why);

// A tensor an op writes in place (out=, quantize_blockwise_into's absmax): refused when it requires grad while grad
// mode is on, as torch's own out= ops refuse it.
void CheckWritable(const char* op, const char* arg, const at::Tensor& t);

// The out= argument of an .out overload: writable, sizes `want` (named `what` in the error, e.g. "A's shape"),
// dtype `dtype`, on A's device.
void CheckOut(const char* op, const at::Tensor& out, c10::SymIntArrayRef want, const char* what,
              c10::ScalarType dtype, const at::Tensor& A);

// The codes and absmax outputs of a quantize into existing tensors, checked as the dispatcher cannot: not sharing
// memory.
void CheckSeparateOuts(const char* op, const at::Tensor& out, const at::Tensor& absmax);

}  // namespace bnb::ops
