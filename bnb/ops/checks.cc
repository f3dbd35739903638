#include "bnb/ops/checks.h"

namespace bnb::ops {

bnb::core::DType FloatDType(const char* op, const char* arg, c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return bnb::core::DType::kFloat32;
    case c10::kHalf: return bnb::core::DType::kFloat16;
    case c10::kBFloat16: return bnb::core::DType::kBFloat16;
    default: TORCH_CHECK(false, "bnb::", op, ": ", arg, " must be float32, float16 or bfloat16, got ", t);
  }
}

void CheckDType(const char* op, const char* arg, const at::Tensor& t, c10::ScalarType want) {
  TORCH_CHECK(t.scalar_type() == want, "bnb::", op, ": ", arg, " must be ", want, ", got ", t.scalar_type());
}

void CheckNotEmpty(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(t.sym_numel() != 0, "bnb::", op, ": ", arg, " is empty (shape ", t.sym_sizes(), "); expected at least ",
              "one element");
}

void CheckSameDevice(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), "bnb::", op, ": ", arg, " is on ", t.device(), " but A is on ",
              ref.device());
}

void CheckNumel(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& want, const char* why) {
  TORCH_CHECK(t.sym_numel() == want, "bnb::", op, ": ", arg, " must hold ", want, " values (", why, "), got ",
              t.sym_numel(), " (shape ", t.sym_sizes(), ")");
}

void CheckOut(const char* op, const at::Tensor& out, c10::SymIntArrayRef want, const char* what,
              c10::ScalarType dtype, const at::Tensor& A) {
  TORCH_CHECK(out.sym_sizes() == want, "bnb::", op, ": out must have ", what, " ", want, ", got ", out.sym_sizes());
  CheckDType(op, "out", out, dtype);
  CheckSameDevice(op, "out", out, A);
}

}  // namespace bnb::ops
