// The LLM.int8() ops on the CPU: bnb/core's passes and int8 product over torch's thread pool.
#include <algorithm>
#include <mutex>
#include <vector>

#include "bnb/core/cpu_settings.h"
#include "bnb/core/int8.h"
#include "bnb/core/int8_gemm.h"
#include "bnb/ops/common/cpu_parallel.h"
#include "bnb/ops/int8/ops.h"

namespace bnb::ops::int8 {
namespace {

// The elements of rows [r0, r1) of a [rows, K] tensor, for ParallelOverBlocks over rows.
struct RowRange {
  int64_t rows, K;
};

// f(r0, r1, partial) over rows on torch's pool, each task with its own `partial` (K values from `init`), merged into
// `total` by merge(partial, total) under a lock.
template <class T, class F, class Merge>
void ReduceOverRows(const char* op, const RowRange& range, T init, const F& f, const Merge& merge,
                    std::vector<T>& total) {
  std::mutex mu;
  ParallelOverBlocks(op, range.rows, range.K, [&](int64_t r0, int64_t r1) {
    std::vector<T> partial(range.K, init);
    f(r0, r1, partial.data());
    std::lock_guard<std::mutex> lock(mu);
    merge(partial.data(), total.data());
  });
}

// A 2-D int8 tensor's data and row stride: t itself when its rows are each contiguous, else a contiguous copy
// (held in `keep`).
struct Rows8 {
  const int8_t* data;
  int64_t stride;
};
Rows8 RowMajor(const at::Tensor& t, at::Tensor& keep) {
  const int64_t K = t.size(1);
  const bool rows_contiguous = (K <= 1 || t.stride(1) == 1) && (t.size(0) <= 1 || t.stride(0) >= K);
  keep = rows_contiguous ? t : t.contiguous();
  const int64_t stride = rows_contiguous && t.size(0) > 1 ? t.stride(0) : K;
  return {keep.data_ptr<int8_t>(), std::max<int64_t>(stride, 1)};
}

// Fewest multiply-adds worth a task of their own (about 5-10 us on one core).
constexpr int64_t kMinProductTaskWork = int64_t{1} << 21;
static_assert(kMaxK == core::kInt8GemmMaxK, "the ops check K against the kernel's limit");

// How an [M, K] x [N, K]^T product splits over torch's pool: one task per thread (cpu.threads, else torch's), none
// of fewer than kMinProductTaskWork multiply-adds, each a range of C's columns (B's rows) in whole tiles of 4, or of
// C's rows where B has too few rows for every task.
struct ProductTasks {
  int64_t tasks;
  bool by_columns;
  int64_t extent;  // N by columns, else M

  ProductTasks(const char* op, int64_t M, int64_t N, int64_t K) {
    absl::StatusOr<core::CpuSettings> settings = core::CurrentCpuSettings();  // applies cpu.isa too
    ThrowIfError(op, settings.status());
    const int64_t work = M * N * std::max<int64_t>(K, 1);
    tasks = std::clamp<int64_t>(work / kMinProductTaskWork, 1, CpuTasks(*settings));
    by_columns = N >= 16 * tasks || M < 16 * tasks;
    extent = by_columns ? N : M;
  }
  // Task t's first column (row), a multiple of 16 (the AMX kernel's tiles; the VNNI kernel's are 4); Begin(tasks)
  // is the extent.
  int64_t Begin(int64_t t) const { return t >= tasks ? extent : std::min(extent, extent * t / tasks / 16 * 16); }

  // f(begin, end) for each task's nonempty range, on torch's pool.
  template <class F>
  void Run(const F& f) const {
    at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (Begin(t) < Begin(t + 1)) f(Begin(t), Begin(t + 1));
      }
    });
  }
};

// Rows of A up to which int8_scaled_mm dequantizes each task's columns of the product as soon as the task has them,
// while they are in its cache (an [M, columns] int32 block per task): at batch 16 that saves ~60 us against a
// product written whole and then dequantized by other tasks. Beyond, the block grows past L2.
constexpr int64_t kFusedDequantRows = 64;

struct Cpu {
  static constexpr bool kIsMeta = false;

  static c10::optional<at::Tensor> QuantizeRows(const char* op, const at::Tensor& A, double threshold,
                                                at::Tensor& codes, at::Tensor& stats) {
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor x = A.contiguous();
    const RowRange range{stats.numel(), A.size(-1)};
    const int64_t K = range.K;
    const float t = static_cast<float>(threshold);
    const void* xp = x.data_ptr();
    int8_t* cp = codes.data_ptr<int8_t>();
    float* sp = stats.data_ptr<float>();
    ParallelOverBlocks(op, range.rows, K, [&](int64_t r0, int64_t r1) {
      core::Int8QuantizeRows(dtype, xp, K, t, r0, r1, cp, sp);
    });
    if (!(t > 0.0f)) return c10::nullopt;
    std::vector<uint8_t> flags(K, 0);
    ReduceOverRows(
        op, range, uint8_t{0},
        [&](int64_t r0, int64_t r1, uint8_t* partial) { core::Int8OutlierColumns(dtype, xp, K, t, r0, r1, partial); },
        [K](const uint8_t* partial, uint8_t* all) {
          for (int64_t k = 0; k < K; ++k) all[k] |= partial[k];
        },
        flags);
    std::vector<int64_t> cols;
    for (int64_t k = 0; k < K; ++k) {
      if (flags[k]) cols.push_back(k);
    }
    if (!cols.empty()) {  // every code of an outlier column is 0
      ParallelOverBlocks(op, range.rows, K, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c : cols) cp[r * K + c] = 0;
        }
      });
    }
    return at::tensor(cols, A.options().dtype(at::kLong));
  }

  static void QuantizeColumns(const char* op, const at::Tensor& A, double threshold, at::Tensor& col_codes,
                              at::Tensor& col_stats) {
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor x = A.contiguous();
    const RowRange range{NumRows(A), A.size(-1)};
    const int64_t K = range.K;
    const float t = static_cast<float>(threshold);
    const void* xp = x.data_ptr();
    std::vector<float> absmax(K, 0.0f);
    ReduceOverRows(
        op, range, 0.0f,
        [&](int64_t r0, int64_t r1, float* partial) { core::Int8ColumnAbsmax(dtype, xp, K, t, r0, r1, partial); },
        [K](const float* partial, float* all) { core::Int8MergeColumnAbsmax(partial, K, all); }, absmax);
    std::copy(absmax.begin(), absmax.end(), col_stats.data_ptr<float>());
    int8_t* cp = col_codes.data_ptr<int8_t>();
    ParallelOverBlocks(op, range.rows, K, [&](int64_t r0, int64_t r1) {
      core::Int8QuantizeColumns(dtype, xp, K, t, absmax.data(), r0, r1, cp);
    });
  }

  static void DequantizeRows(const char* op, const at::Tensor& A, const at::Tensor& stats, at::Tensor& out) {
    const at::Tensor a = A.contiguous(), s = stats.contiguous();
    const int64_t K = A.size(-1), rows = NumRows(A);
    const int8_t* ap = a.data_ptr<int8_t>();
    const float* sp = s.data_ptr<float>();
    float* op_out = out.data_ptr<float>();
    ParallelOverBlocks(op, rows, K, [&](int64_t r0, int64_t r1) {
      core::Int8DequantizeRows(ap, sp, K, r0, r1, op_out);
    });
  }

  // bnb/core's int8 product (int8_gemm.h), in ProductTasks. It replaced at::_int_mm for every shape: 4x faster at
  // batch 16, even at 512, and at batch 1 as fast within Linear8bitLt on Zen 4; with AMX-INT8 (Sapphire Rapids)
  // 1.1-1.8x at 1-512 rows (tools/bench/NOTES.md, 'int8 product', 'int8 product on AMX').
  static void Matmul(const char* op, const at::Tensor& A, const at::Tensor& B, at::Tensor& out) {
    const ProductTasks tasks(op, A.size(0), B.size(0), A.size(1));
    at::Tensor a_keep, b_keep;
    const Rows8 a = RowMajor(A, a_keep), b = RowMajor(B, b_keep);
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    if (M == 0 || N == 0) return;
    int32_t* c = out.data_ptr<int32_t>();
    tasks.Run([&](int64_t begin, int64_t end) {
      if (tasks.by_columns) {
        core::Int8Gemm(a.data, a.stride, b.data, b.stride, M, K, begin, end, c, N);
      } else {
        core::Int8Gemm(a.data + begin * a.stride, a.stride, b.data, b.stride, end - begin, K, 0, N, c + begin * N, N);
      }
    });
  }

  // Up to kFusedDequantRows rows: each task's columns of the product into its own block, then dequantized from there.
  static bool ScaledMatmul(const char* op, const at::Tensor& A, const at::Tensor& B, const at::Tensor& row_stats,
                           const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias, at::Tensor& out) {
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    const ProductTasks tasks(op, M, N, K);
    if (M > kFusedDequantRows || !tasks.by_columns) return false;
    const core::DType out_type = FloatDType(op, "dtype", out.scalar_type());
    const at::Tensor rs = row_stats.contiguous(), cs = col_stats.contiguous();
    const at::Tensor bias_c = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::DType bias_type =
        bias_c.defined() ? FloatDType(op, "bias", bias_c.scalar_type()) : core::DType::kFloat32;
    at::Tensor a_keep, b_keep;
    const Rows8 a = RowMajor(A, a_keep), b = RowMajor(B, b_keep);
    if (M == 0 || N == 0) return true;
    const float* rp = rs.data_ptr<float>();
    const float* cp = cs.data_ptr<float>();
    const char* bp = bias_c.defined() ? static_cast<const char*>(bias_c.data_ptr()) : nullptr;
    const size_t bias_size = core::DTypeSize(bias_type), out_size = core::DTypeSize(out_type);
    char* op_out = static_cast<char*>(out.data_ptr());
    tasks.Run([&](int64_t begin, int64_t end) {
      const int64_t width = end - begin;
      std::vector<int32_t> block(static_cast<size_t>(M * width));
      core::Int8Gemm(a.data, a.stride, b.data + begin * b.stride, b.stride, M, K, 0, width, block.data(), width);
      for (int64_t r = 0; r < M; ++r) {  // row r of the block: the dequantization's row 0 of width columns
        core::Int8DequantizeProduct(block.data() + r * width, rp + r, cp + begin, bias_type,
                                    bp != nullptr ? bp + begin * bias_size : nullptr, width, 0, 1, out_type,
                                    op_out + (r * N + begin) * out_size);
      }
    });
    return true;
  }

  static at::Tensor DequantizeColumns(const char* op, const at::Tensor& codes, const at::Tensor& stats,
                                      const at::Tensor& cols, c10::ScalarType dtype) {
    const core::DType out_type = FloatDType(op, "dtype", dtype);
    const at::Tensor c = codes.contiguous(), s = stats.contiguous(), idx = cols.contiguous();
    const int64_t rows = c.size(0), K = c.size(1), n = idx.numel();
    at::Tensor out = at::empty({rows, n}, codes.options().dtype(dtype));
    if (rows == 0 || n == 0) return out;
    const int8_t* cp = c.data_ptr<int8_t>();
    const float* sp = s.data_ptr<float>();
    const int64_t* ip = idx.data_ptr<int64_t>();
    void* op_out = out.data_ptr();
    // A row's columns are a few scattered loads: counted as a line each, so rows split over threads.
    ParallelOverBlocks(op, rows, 16 * n, [&](int64_t r0, int64_t r1) {
      core::Int8DequantizeColumns(cp, K, sp, ip, n, r0, r1, out_type, op_out);
    });
    return out;
  }

  static void DequantizeProduct(const char* op, const at::Tensor& A, const at::Tensor& row_stats,
                                const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias,
                                at::Tensor& out) {
    const core::DType out_type = FloatDType(op, "dtype", out.scalar_type());
    const at::Tensor a = A.contiguous(), rs = row_stats.contiguous(), cs = col_stats.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::DType bias_type = b.defined() ? FloatDType(op, "bias", b.scalar_type()) : core::DType::kFloat32;
    const int64_t N = a.size(-1), rows = NumRows(a);
    const int32_t* ap = a.data_ptr<int32_t>();
    const float* rp = rs.data_ptr<float>();
    const float* cp = cs.data_ptr<float>();
    const void* bp = b.defined() ? b.data_ptr() : nullptr;
    void* op_out = out.data_ptr();
    ParallelOverBlocks(op, rows, N, [&](int64_t r0, int64_t r1) {
      core::Int8DequantizeProduct(ap, rp, cp, bias_type, bp, N, r0, r1, out_type, op_out);
    });
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { Ops<Cpu>::Register(m); }

}  // namespace bnb::ops::int8
