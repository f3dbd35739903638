// Which int8 product kernel runs (int8_gemm.h): the instruction set dispatched under the cpu.isa cap, the cpu.amx
// knob, and the processor's AVX512-VNNI and AMX-INT8.
#include "bnb/core/int8_gemm.h"

#include "bnb/core/cpu_isa.h"
#include "bnb/core/int8_gemm_x86.h"
#include "hwy/targets.h"

namespace bnb::core {

Int8GemmKernel ActiveInt8GemmKernel() {
#if BNB_INT8_GEMM_X86
  // Highway numbers better x86 targets with lower bits (the AVX-512 ones at or below HWY_AVX3); every other
  // architecture's targets, and the emulated ones, have higher bits.
  const int64_t target = ActiveTarget();
  if (target <= HWY_AVX3 && AmxAllowed() && int8_gemm_x86::HasAmxInt8()) return Int8GemmKernel::kAmxInt8;
  if (target <= HWY_AVX3 && int8_gemm_x86::HasAvx512Vnni()) return Int8GemmKernel::kAvx512Vnni;
  if (target <= HWY_AVX2) return Int8GemmKernel::kAvx2;
#endif
  return Int8GemmKernel::kScalar;
}

const char* Int8GemmKernelName(Int8GemmKernel kernel) {
  switch (kernel) {
    case Int8GemmKernel::kAmxInt8: return "amx";
    case Int8GemmKernel::kAvx512Vnni: return "avx512vnni";
    case Int8GemmKernel::kAvx2: return "avx2";
    case Int8GemmKernel::kScalar: break;
  }
  return "scalar";
}

void Int8Gemm(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
              int64_t n1, int32_t* C, int64_t ldc) {
  if (M <= 0 || n1 <= n0) return;
  switch (ActiveInt8GemmKernel()) {
#if BNB_INT8_GEMM_X86
    case Int8GemmKernel::kAmxInt8: return int8_gemm_x86::GemmAmxInt8(A, lda, B, ldb, M, K, n0, n1, C, ldc);
    case Int8GemmKernel::kAvx512Vnni: return int8_gemm_x86::GemmAvx512Vnni(A, lda, B, ldb, M, K, n0, n1, C, ldc);
    case Int8GemmKernel::kAvx2: return int8_gemm_x86::GemmAvx2(A, lda, B, ldb, M, K, n0, n1, C, ldc);
#endif
    default: return int8_scalar::Gemm(A, lda, B, ldb, M, K, n0, n1, C, ldc);
  }
}

}  // namespace bnb::core
