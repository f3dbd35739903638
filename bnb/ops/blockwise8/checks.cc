// The blockwise 8-bit ops' argument checks (ops.h).
#include "bnb/ops/blockwise8/ops.h"

namespace bnb::ops::blockwise8 {
namespace {

void CheckCode(const char* op, const at::Tensor& code, const at::Tensor& A) {
  CheckDType(op, "code", code, at::kFloat);
  CheckNumel(op, "code", code, core::kCodebookSize, "one value per 8-bit code");
  CheckSameDevice(op, "code", code, A);
}

// The CUDA kernels take blocks of up to 4096 values; the CPU ones (and every other device's, by the reference
// kernels) more, as bitsandbytes' CPU path does.
void CheckBlocksize(const char* op, int64_t blocksize, const at::Tensor& A) {
  ThrowIfError(op, core::CheckBlocksize(blocksize, A.is_cuda() ? core::kMaxBlocksize : core::kMaxCpuBlocksize8));
}

}  // namespace

core::DType CheckQuantize(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize) {
  const core::DType dtype = FloatDType(op, "A", A.scalar_type());
  CheckBlocksize(op, blocksize, A);
  CheckNotEmpty(op, "A", A);
  CheckCode(op, code, A);
  return dtype;
}

void CheckAbsmax(const char* op, const at::Tensor& absmax, const at::Tensor& A, int64_t blocksize) {
  CheckDType(op, "absmax", absmax, at::kFloat);
  CheckNumel(op, "absmax", absmax, NumBlocks(A.sym_numel(), blocksize), "one per block of A");
  CheckSameDevice(op, "absmax", absmax, A);
}

core::DType CheckDequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                            int64_t blocksize, c10::ScalarType dtype) {
  const core::DType out_type = FloatDType(op, "dtype", dtype);
  CheckDType(op, "A", A, at::kByte);
  CheckBlocksize(op, blocksize, A);
  CheckNotEmpty(op, "A", A);
  CheckAbsmax(op, absmax, A, blocksize);
  CheckCode(op, code, A);
  return out_type;
}

}  // namespace bnb::ops::blockwise8
