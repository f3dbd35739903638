#include "bnb/ops/common/checks.h"

#include <ATen/MemoryOverlap.h>
#include <c10/core/GradMode.h>

#include <cctype>
#include <string>

namespace bnb::ops {

std::ostream& operator<<(std::ostream& os, DTypeName name) {
  switch (name.type) {
    case c10::kByte: return os << "uint8";
    case c10::kChar: return os << "int8";
    case c10::kShort: return os << "int16";
    case c10::kInt: return os << "int32";
    case c10::kLong: return os << "int64";
    case c10::kHalf: return os << "float16";
    case c10::kFloat: return os << "float32";
    case c10::kDouble: return os << "float64";
    case c10::kBFloat16: return os << "bfloat16";
    case c10::kBool: return os << "bool";
    case c10::kComplexHalf: return os << "complex32";
    case c10::kComplexFloat: return os << "complex64";
    case c10::kComplexDouble: return os << "complex128";
    default: {  // c10's other names are Python's capitalized: UInt16, Float8_e4m3fn, QInt8
      std::string s = c10::toString(name.type);
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return os << s;
    }
  }
}

bnb::core::DType FloatDType(const char* op, const char* arg, c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return bnb::core::DType::kFloat32;
    case c10::kHalf: return bnb::core::DType::kFloat16;
    case c10::kBFloat16: return bnb::core::DType::kBFloat16;
    default:
      TORCH_CHECK(false, "bnb::", op, ": ", arg, " must be float32, float16 or bfloat16, got ", DTypeName{t});
  }
}

int64_t CheckedNumel(const char* op, const char* arg, at::IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t d : sizes) {
    TORCH_CHECK(d >= 0, "bnb::", op, ": ", arg, " ", sizes, " has a negative size");
    TORCH_CHECK(!__builtin_mul_overflow(n, d, &n), "bnb::", op, ": ", arg, " ", sizes, " has more than 2^63 elements");
  }
  return n;
}

void CheckDType(const char* op, const char* arg, const at::Tensor& t, c10::ScalarType want) {
  TORCH_CHECK(t.scalar_type() == want, "bnb::", op, ": ", arg, " must be ", DTypeName{want}, ", got ",
              DTypeName{t.scalar_type()});
}

void CheckNotEmpty(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(t.sym_numel() != 0, "bnb::", op, ": ", arg, " is empty (shape ", t.sym_sizes(), "); expected at least ",
              "one element");
}

void CheckSameDevice(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& ref,
                     const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), "bnb::", op, ": ", arg, " is on ", t.device(), " but ", ref_name, " is on ",
              ref.device());
}

void CheckNumel(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& want, const char* why) {
  TORCH_CHECK(t.sym_numel() == want, "bnb::", op, ": ", arg, " must hold ", want, " values (", why, "), got ",
              t.sym_numel(), " (shape ", t.sym_sizes(), ")");
}

void CheckWritable(const char* op, const char* arg, const at::Tensor& t) {
  // As torch's own out= ops: the write could not be differentiated, and would change a leaf autograd tracks.
  TORCH_CHECK(!(t.requires_grad() && c10::GradMode::is_enabled()), "bnb::", op, ": ", arg, " requires grad; out= ",
              "arguments do not support automatic differentiation (use torch.no_grad() or a tensor without grad)");
}

void CheckOut(const char* op, const at::Tensor& out, c10::SymIntArrayRef want, const char* what,
              c10::ScalarType dtype, const at::Tensor& A) {
  CheckWritable(op, "out", out);
  TORCH_CHECK(out.sym_sizes() == want, "bnb::", op, ": out must have ", what, " ", want, ", got ", out.sym_sizes());
  CheckDType(op, "out", out, dtype);
  CheckSameDevice(op, "out", out, A);
}

void CheckSeparateOuts(const char* op, const at::Tensor& out, const at::Tensor& absmax) {
  // Each would be written through a temporary (FillOut) and the later copy clobber the other. Strided views
  // (TooHard to decide) count as sharing when they are views of one storage.
  const at::MemOverlapStatus overlap = at::get_overlap_status(out, absmax);
  TORCH_CHECK(overlap == at::MemOverlapStatus::No ||
                  (overlap == at::MemOverlapStatus::TooHard && !out.storage().is_alias_of(absmax.storage())),
              "bnb::", op, ": out and absmax share memory; pass separate tensors");
}

}  // namespace bnb::ops
