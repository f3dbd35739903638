// bnb's LLM.int8() ops on bnbdev, out of bnb's tree: bnb/ops/int8/ops.h gives the checks, shapes, outputs and the
// compositions (int8_scaled_mm, int8_mixed_scaled_mm), this Backend the passes: bnb/core's CPU ones on one thread
// (bnbdev's memory is host memory), and the int8 product by torch's CPU at::_int_mm over CPU views of it.
#include <vector>

#include "bnb/core/int8.h"
#include "bnb/ops/int8/ops.h"
#include "bnb/tests/device/kernels/calls.h"

namespace bnbdev_kernels {
namespace {

namespace core = bnb::core;
using bnb::ops::FloatDType;
using bnb::ops::int8::NumRows;

// A CPU tensor over the same host memory as the contiguous bnbdev tensor t.
at::Tensor OnHost(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

struct Bnbdev {
  static constexpr bool kIsMeta = false;

  static c10::optional<at::Tensor> QuantizeRows(const char* op, const at::Tensor& A, double threshold,
                                                at::Tensor& codes, at::Tensor& stats) {
    CountCall(op);
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor x = A.contiguous();
    const int64_t rows = NumRows(A), K = A.size(-1);
    const float t = static_cast<float>(threshold);
    int8_t* cp = codes.data_ptr<int8_t>();
    core::Int8QuantizeRows(dtype, x.data_ptr(), K, t, 0, rows, cp, stats.data_ptr<float>());
    if (!(t > 0.0f)) return c10::nullopt;
    std::vector<uint8_t> flags(K, 0);
    core::Int8OutlierColumns(dtype, x.data_ptr(), K, t, 0, rows, flags.data());
    std::vector<int64_t> cols;
    for (int64_t k = 0; k < K; ++k) {
      if (flags[k]) cols.push_back(k);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c : cols) cp[r * K + c] = 0;
    }
    return at::tensor(cols, at::kLong).to(A.device());
  }

  static void QuantizeColumns(const char* op, const at::Tensor& A, double threshold, at::Tensor& col_codes,
                              at::Tensor& col_stats) {
    CountCall(op);
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor x = A.contiguous();
    const int64_t rows = NumRows(A), K = A.size(-1);
    const float t = static_cast<float>(threshold);
    float* absmax = col_stats.data_ptr<float>();
    std::fill(absmax, absmax + K, 0.0f);
    core::Int8ColumnAbsmax(dtype, x.data_ptr(), K, t, 0, rows, absmax);
    core::Int8QuantizeColumns(dtype, x.data_ptr(), K, t, absmax, 0, rows, col_codes.data_ptr<int8_t>());
  }

  static void DequantizeRows(const char* op, const at::Tensor& A, const at::Tensor& stats, at::Tensor& out) {
    CountCall(op);
    const at::Tensor a = A.contiguous(), s = stats.contiguous();
    core::Int8DequantizeRows(a.data_ptr<int8_t>(), s.data_ptr<float>(), a.size(-1), 0, NumRows(a),
                             out.data_ptr<float>());
  }

  static void Matmul(const char* op, const at::Tensor& A, const at::Tensor& B, at::Tensor& out) {
    CountCall(op);
    const at::Tensor a = A.contiguous(), b = B.contiguous();
    at::Tensor host_out = OnHost(out);
    at::_int_mm_out(host_out, OnHost(a), OnHost(b).t());
  }

  static void DequantizeProduct(const char* op, const at::Tensor& A, const at::Tensor& row_stats,
                                const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias,
                                at::Tensor& out) {
    CountCall(op);
    const core::DType out_type = FloatDType(op, "dtype", out.scalar_type());
    const at::Tensor a = A.contiguous(), rs = row_stats.contiguous(), cs = col_stats.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::DType bias_type = b.defined() ? FloatDType(op, "bias", b.scalar_type()) : core::DType::kFloat32;
    core::Int8DequantizeProduct(a.data_ptr<int32_t>(), rs.data_ptr<float>(), cs.data_ptr<float>(), bias_type,
                                b.defined() ? b.data_ptr() : nullptr, a.size(-1), 0, NumRows(a), out_type,
                                out.data_ptr());
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, PrivateUse1, m) { bnb::ops::int8::Ops<Bnbdev>::Register(m); }

}  // namespace bnbdev_kernels
