// The x86 kernels of the int8 matrix product (int8_gemm.h), for its dispatch in int8_gemm.cc.
#pragma once

#include <cstdint>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define BNB_INT8_GEMM_X86 1
#else
#define BNB_INT8_GEMM_X86 0
#endif

#if BNB_INT8_GEMM_X86
namespace bnb::core::int8_gemm_x86 {

// Whether the processor has AVX512-VNNI (CPUID; the caller checks that AVX-512 itself is dispatched).
bool HasAvx512Vnni();

// Whether the processor has AVX512-VNNI and AMX-INT8 and Linux granted this process the tile state (amx_tiles.h).
bool HasAmxInt8();

// Int8Gemm's contract (int8_gemm.h); each needs its instruction set on the processor.
void GemmAvx512Vnni(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
                    int64_t n1, int32_t* C, int64_t ldc);
// AMX (int8_gemm_amx.cc): whole tiles of 16 columns where K is a multiple of 64 and M is not small, the rest by
// GemmAvx512Vnni.
void GemmAmxInt8(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
                 int64_t n1, int32_t* C, int64_t ldc);
void GemmAvx2(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
              int64_t n1, int32_t* C, int64_t ldc);

}  // namespace bnb::core::int8_gemm_x86
#endif
