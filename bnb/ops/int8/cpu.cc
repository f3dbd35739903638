// The LLM.int8() ops on the CPU: bnb/core's passes over torch's thread pool; the int8 product by torch's own
// at::_int_mm.
#include <mutex>
#include <vector>

#include "bnb/core/int8.h"
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

  static void Matmul(const char*, const at::Tensor& A, const at::Tensor& B, at::Tensor& out) {
    at::_int_mm_out(out, A.contiguous(), B.t());
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
