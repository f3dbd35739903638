#include "bnb/jit/int8.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/launch.h"
#include "bnb/jit/launch_shape.h"
#include "bnb/jit/threads_per_block.h"

namespace bnb::jit {
namespace {

constexpr const char* kQuantizeRows = "int8_quantize_rows";
constexpr const char* kColumnAbsmax = "int8_column_absmax";
constexpr const char* kQuantizeColumns = "int8_quantize_columns";
constexpr const char* kDequantizeRows = "int8_dequantize_rows";
constexpr const char* kDequantizeColumns = "int8_dequantize_columns";
constexpr const char* kDequantizeProduct = "int8_dequantize_product";
constexpr const char* kScaledGemv = "int8_scaled_gemv";
constexpr int kGemvRows[] = {1, 4, 16};  // the row counts compiled: a decode step's 1, small batches 4 and 16

// Columns a warp of int8_scaled_gemv takes: each 16 bytes of A a lane loads serve C columns (the rows of A are
// re-read from L1 per C columns of the weight).
int GemvColumns(int rows) { return rows <= 1 ? 2 : 4; }
constexpr core::DType kTypes[] = {core::DType::kFloat32, core::DType::kFloat16, core::DType::kBFloat16};

absl::StatusOr<LoadedKernel> Get(KernelCache& cache, int device, const std::string& entry, core::DType dtype,
                                 core::DType bias, int threads) {
  absl::StatusOr<KernelSpec> spec = Int8Spec(entry, dtype, bias, threads, "");
  if (!spec.ok()) return spec.status();
  return cache.GetKernel(*spec, device);
}

}  // namespace

absl::StatusOr<KernelSpec> Int8Spec(const std::string& entry, core::DType dtype, core::DType bias, int threads,
                                    const std::string& arch, int rows) {
  threads = ThreadsPerBlock(threads);
  if (absl::Status st = CheckThreadsPerBlock("int8", threads); !st.ok()) return st;
  KernelSpec s;
  s.template_name = "int8";
  s.entry = entry;
  s.arch = arch;
  if (entry == kQuantizeRows || entry == kColumnAbsmax || entry == kQuantizeColumns || entry == kDequantizeColumns) {
    s.template_args = {{"T", CudaTypeName(dtype)}, {"THREADS", absl::StrCat(threads)}};
  } else if (entry == kDequantizeRows) {
    s.template_args = {{"THREADS", absl::StrCat(threads)}};
  } else if (entry == kDequantizeProduct) {
    s.template_args = {{"T", CudaTypeName(dtype)}, {"B", CudaTypeName(bias)}, {"THREADS", absl::StrCat(threads)}};
  } else if (entry == kScaledGemv) {
    if (std::find(std::begin(kGemvRows), std::end(kGemvRows), rows) == std::end(kGemvRows)) {
      return absl::InvalidArgumentError(absl::StrCat("int8_scaled_gemv: rows must be 1, 4 or 16, got ", rows));
    }
    s.template_args = {{"T", CudaTypeName(dtype)},
                       {"B", CudaTypeName(bias)},
                       {"R", absl::StrCat(rows)},
                       {"C", absl::StrCat(GemvColumns(rows))},
                       {"THREADS", absl::StrCat(threads)}};
  } else {
    return absl::InvalidArgumentError(absl::StrCat("int8: no kernel '", entry, "' in kernels/int8.cuh"));
  }
  return s;
}

std::vector<KernelSpec> AllInt8Specs(const std::string& arch, int threads) {
  std::vector<KernelSpec> out = {*Int8Spec(kDequantizeRows, core::DType::kFloat32, core::DType::kFloat32, threads,
                                           arch)};
  for (core::DType t : kTypes) {
    for (const char* entry : {kQuantizeRows, kColumnAbsmax, kQuantizeColumns, kDequantizeColumns}) {
      out.push_back(*Int8Spec(entry, t, t, threads, arch));
    }
    for (core::DType b : kTypes) {
      out.push_back(*Int8Spec(kDequantizeProduct, t, b, threads, arch));
      for (int rows : kGemvRows) out.push_back(*Int8Spec(kScaledGemv, t, b, threads, arch, rows));
    }
  }
  return out;
}

BNB_REGISTER_KERNEL_FAMILY(int8, AllInt8Specs);

absl::Status LaunchInt8QuantizeRows(KernelCache& cache, int device, core::DType dtype, const void* x, int64_t rows,
                                    int64_t K, float threshold, int8_t* codes, float* stats, uint8_t* outlier_flags,
                                    void* stream, int threads) {
  if (rows == 0) return absl::OkStatus();
  absl::StatusOr<LoadedKernel> k = Get(cache, device, kQuantizeRows, dtype, dtype, threads);
  if (!k.ok()) return k.status();
  const Dim3 grid{static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 16))};
  return Launch(*k, grid, Dim3{static_cast<unsigned>(ThreadsPerBlock(threads))}, 0, stream, x,
                static_cast<long long>(rows), static_cast<long long>(K), threshold, codes, stats, outlier_flags);
}

absl::Status LaunchInt8QuantizeColumns(KernelCache& cache, int device, core::DType dtype, const void* x, int64_t rows,
                                       int64_t K, float threshold, float* col_absmax, int8_t* codes, void* stream,
                                       int threads) {
  if (rows == 0 || K == 0) return absl::OkStatus();
  const int t = ThreadsPerBlock(threads);
  absl::StatusOr<LoadedKernel> absmax = Get(cache, device, kColumnAbsmax, dtype, dtype, threads);
  if (!absmax.ok()) return absmax.status();
  // Enough row chunks that the column CTAs fill the GPU even for few columns; each chunk at least 64 rows.
  const int64_t col_ctas = (K + t - 1) / t;
  const int64_t chunks = std::clamp<int64_t>(std::min<int64_t>((rows + 63) / 64, 1024 / col_ctas), 1, 65535);
  const int64_t rows_per_cta = (rows + chunks - 1) / chunks;
  const Dim3 grid{static_cast<unsigned>(col_ctas), static_cast<unsigned>((rows + rows_per_cta - 1) / rows_per_cta)};
  if (absl::Status st = Launch(*absmax, grid, Dim3{static_cast<unsigned>(t)}, 0, stream, x,
                               static_cast<long long>(rows), static_cast<long long>(K), threshold,
                               static_cast<long long>(rows_per_cta), col_absmax);
      !st.ok()) {
    return st;
  }
  absl::StatusOr<LoadedKernel> quantize = Get(cache, device, kQuantizeColumns, dtype, dtype, threads);
  if (!quantize.ok()) return quantize.status();
  const int64_t n = rows * K;
  return Launch(*quantize, ElementGrid(n, t), Dim3{static_cast<unsigned>(t)}, 0, stream, x,
                static_cast<long long>(n), static_cast<long long>(K), threshold,
                static_cast<const float*>(col_absmax), codes);
}

absl::Status LaunchInt8DequantizeRows(KernelCache& cache, int device, const int8_t* codes, const float* stats,
                                      int64_t rows, int64_t K, float* out, void* stream, int threads) {
  const int64_t n = rows * K;
  if (n == 0) return absl::OkStatus();
  const int t = ThreadsPerBlock(threads);
  absl::StatusOr<LoadedKernel> k = Get(cache, device, kDequantizeRows, core::DType::kFloat32,
                                       core::DType::kFloat32, threads);
  if (!k.ok()) return k.status();
  return Launch(*k, ElementGrid(n, t), Dim3{static_cast<unsigned>(t)}, 0, stream, codes, stats,
                static_cast<long long>(n), static_cast<long long>(K), out);
}

absl::Status LaunchInt8DequantizeColumns(KernelCache& cache, int device, core::DType dtype, const int8_t* codes,
                                         int64_t rows, int64_t K, const float* stats, const int64_t* cols,
                                         int64_t n_cols, void* out, void* stream, int threads) {
  const int64_t n = rows * n_cols;
  if (n == 0) return absl::OkStatus();
  const int t = ThreadsPerBlock(threads);
  absl::StatusOr<LoadedKernel> k = Get(cache, device, kDequantizeColumns, dtype, dtype, threads);
  if (!k.ok()) return k.status();
  return Launch(*k, ElementGrid(n, t), Dim3{static_cast<unsigned>(t)}, 0, stream, codes, static_cast<long long>(K),
                stats, reinterpret_cast<const long long*>(cols), static_cast<long long>(n_cols),
                static_cast<long long>(n), out);
}

absl::Status LaunchInt8DequantizeProduct(KernelCache& cache, int device, const int32_t* A, const float* row_stats,
                                         const float* col_stats, core::DType bias_dtype, const void* bias,
                                         int64_t rows, int64_t N, core::DType dtype, void* out, void* stream,
                                         int threads) {
  const int64_t n = rows * N;
  if (n == 0) return absl::OkStatus();
  const int t = ThreadsPerBlock(threads);
  absl::StatusOr<LoadedKernel> k = Get(cache, device, kDequantizeProduct, dtype, bias_dtype, threads);
  if (!k.ok()) return k.status();
  return Launch(*k, ElementGrid(n, t), Dim3{static_cast<unsigned>(t)}, 0, stream, A, row_stats, col_stats, bias,
                static_cast<long long>(n), static_cast<long long>(N), out);
}

bool Int8ScaledGemvFits(int64_t rows, int64_t K, const int8_t* A, const int8_t* W) {
  return rows >= 1 && rows <= kInt8GemvMaxRows && K % 16 == 0 && reinterpret_cast<uintptr_t>(A) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(W) % 16 == 0;
}

absl::Status LaunchInt8ScaledGemv(KernelCache& cache, int device, const int8_t* A, const int8_t* W,
                                  const float* row_stats, const float* col_stats, core::DType bias_dtype,
                                  const void* bias, int64_t rows, int64_t N, int64_t K, core::DType dtype, void* out,
                                  void* stream, int threads) {
  if (!Int8ScaledGemvFits(rows, K, A, W)) {
    return absl::InvalidArgumentError(absl::StrCat("int8_scaled_gemv: takes 1 to ", kInt8GemvMaxRows,
                                                   " rows, K a multiple of 16 and 16-byte aligned codes; got ", rows,
                                                   " rows, K ", K));
  }
  if (N == 0) return absl::OkStatus();
  const int r = *std::find_if(std::begin(kGemvRows), std::end(kGemvRows), [&](int n) { return n >= rows; });
  absl::StatusOr<KernelSpec> spec = Int8Spec(kScaledGemv, dtype, bias_dtype, threads, "", r);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<LoadedKernel> k = cache.GetKernel(*spec, device);
  if (!k.ok()) return k.status();
  const int t = ThreadsPerBlock(threads);
  const int64_t columns_per_cta = int64_t{t / 32} * GemvColumns(r);
  const Dim3 grid{static_cast<unsigned>((N + columns_per_cta - 1) / columns_per_cta)};
  return Launch(*k, grid, Dim3{static_cast<unsigned>(t)}, 0, stream, A, W, row_stats, col_stats, bias,
                static_cast<int>(rows), static_cast<long long>(N), static_cast<long long>(K), out);
}

}  // namespace bnb::jit
