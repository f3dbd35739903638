// Host side of kernels/int8.cuh: the kernel specs and launches of the LLM.int8() passes on CUDA. Pointers are
// device pointers (row-major, contiguous); `stream` is the runtime's stream handle as void*; `threads` is the
// cuda.threads_per_block knob's value (0: its default). Results equal bnb/core/int8.h's CPU passes bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/core/dtype.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_spec.h"

namespace bnb::jit {

// The pass `entry` of kernels/int8.cuh for input (or output) type `dtype` (and, for int8_dequantize_product and
// int8_scaled_gemv, bias type `bias`; for int8_scaled_gemv, `rows` rows at most: 1, 4 or 16); entries without a
// type ignore it.
absl::StatusOr<KernelSpec> Int8Spec(const std::string& entry, core::DType dtype, core::DType bias, int threads,
                                    const std::string& arch, int rows = 1);

// Every int8 spec for every type; registered as the int8 family (kernel_registry.h).
std::vector<KernelSpec> AllInt8Specs(const std::string& arch, int threads = 0);

// stats, codes and outlier flags of x's rows ([rows, K] of dtype); flags: K bytes, 0 on entry (null for threshold
// <= 0). One row: the flags need not start at 0, and the codes come with the outlier columns zeroed.
absl::Status LaunchInt8QuantizeRows(KernelCache& cache, int device, core::DType dtype, const void* x, int64_t rows,
                                    int64_t K, float threshold, int8_t* codes, float* stats, uint8_t* outlier_flags,
                                    void* stream, int threads = 0);
// col_absmax (K floats, 0 on entry) and then the column codes of x.
absl::Status LaunchInt8QuantizeColumns(KernelCache& cache, int device, core::DType dtype, const void* x, int64_t rows,
                                       int64_t K, float threshold, float* col_absmax, int8_t* codes, void* stream,
                                       int threads = 0);
absl::Status LaunchInt8DequantizeRows(KernelCache& cache, int device, const int8_t* codes, const float* stats,
                                      int64_t rows, int64_t K, float* out, void* stream, int threads = 0);
// out [rows, n_cols] (dtype) = the columns `cols` (device int64, each in [0, K)) of codes [rows, K], dequantized
// by their row's stats.
absl::Status LaunchInt8DequantizeColumns(KernelCache& cache, int device, core::DType dtype, const int8_t* codes,
                                         int64_t rows, int64_t K, const float* stats, const int64_t* cols,
                                         int64_t n_cols, void* out, void* stream, int threads = 0);
// out (dtype) from the int32 product A ([rows, N]); bias (bias_dtype, N values) may be null.
absl::Status LaunchInt8DequantizeProduct(KernelCache& cache, int device, const int32_t* A, const float* row_stats,
                                         const float* col_stats, core::DType bias_dtype, const void* bias,
                                         int64_t rows, int64_t N, core::DType dtype, void* out, void* stream,
                                         int threads = 0);

// The largest row count int8_scaled_gemv takes; more rows go to a GEMM.
inline constexpr int64_t kInt8GemvMaxRows = 16;

// Whether LaunchInt8ScaledGemv takes these operands: 1 to kInt8GemvMaxRows rows, K a multiple of 16, codes A and
// W 16-byte aligned.
bool Int8ScaledGemvFits(int64_t rows, int64_t K, const int8_t* A, const int8_t* W);

// out [rows, N] (dtype) = the int32 product of codes A [rows, K] and W [N, K], dequantized as
// LaunchInt8DequantizeProduct does, in one pass over W (Int8ScaledGemvFits must hold); bias may be null.
absl::Status LaunchInt8ScaledGemv(KernelCache& cache, int device, const int8_t* A, const int8_t* W,
                                  const float* row_stats, const float* col_stats, core::DType bias_dtype,
                                  const void* bias, int64_t rows, int64_t N, int64_t K, core::DType dtype, void* out,
                                  void* stream, int threads = 0);

}  // namespace bnb::jit
