// The LLM.int8() ops on CUDA, by ATen's CUDA kernels following the definition step by step (reference/int8.py);
// the int8 product by at::_int_mm (cuBLASLt) where its shape rules allow, else exactly in float64.
#include <c10/core/DeviceGuard.h>

#include "bnb/core/int8.h"
#include "bnb/ops/int8/ops.h"

namespace bnb::ops::int8 {
namespace {

// round-half-even(scaled) clamped to [-127, 127], 0 in rows (or columns) whose absmax is 0 or not finite.
at::Tensor Codes(const at::Tensor& scaled, const at::Tensor& absmax) {
  const at::Tensor usable = at::isfinite(absmax) & (absmax > 0);
  return at::where(usable, at::round(scaled).clamp(-127, 127), at::zeros({}, scaled.options())).to(at::kChar);
}

// x (float32 [rows, K]) with its outliers as 0, and their mask (undefined for threshold 0).
std::pair<at::Tensor, at::Tensor> WithoutOutliers(const at::Tensor& x, float t) {
  if (!(t > 0.0f)) return {x, at::Tensor()};
  const at::Tensor mask = x.abs() >= at::scalar_tensor(t, x.options());
  return {x.masked_fill(mask, 0.0), mask};
}

struct Cuda {
  static constexpr bool kIsMeta = false;

  static c10::optional<at::Tensor> QuantizeRows(const char*, const at::Tensor& A, double threshold,
                                                at::Tensor& codes, at::Tensor& stats) {
    const c10::DeviceGuard guard(A.device());
    const float t = static_cast<float>(threshold);
    const auto [x, mask] = WithoutOutliers(Rows(A).to(at::kFloat), t);
    const at::Tensor absmax = x.abs().amax(1);
    at::Tensor q = Codes(x * (at::full_like(absmax, 127.0) / absmax).unsqueeze(1), absmax.unsqueeze(1));
    stats.copy_(absmax);
    if (!mask.defined()) {
      codes.view_as(q).copy_(q);
      return c10::nullopt;
    }
    const at::Tensor cols = mask.any(0).nonzero().view({-1});
    q.index_fill_(1, cols, 0);
    codes.view_as(q).copy_(q);
    return cols;
  }

  static void QuantizeColumns(const char*, const at::Tensor& A, double threshold, at::Tensor& col_codes,
                              at::Tensor& col_stats) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor x = WithoutOutliers(Rows(A).to(at::kFloat), static_cast<float>(threshold)).first;
    const at::Tensor absmax = x.abs().amax(0);
    col_stats.copy_(absmax);
    col_codes.view_as(x).copy_(Codes((x * 127.0) / absmax, absmax));
  }

  static void DequantizeRows(const char*, const at::Tensor& A, const at::Tensor& stats, at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor rows = Rows(A).to(at::kFloat);
    out.view_as(rows).copy_((rows * stats.reshape({-1, 1})) * core::kInv127);
  }

  static void Matmul(const char*, const at::Tensor& A, const at::Tensor& B, at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    if (M > 16 && K % 8 == 0 && N % 8 == 0) {  // at::_int_mm's rules on CUDA
      at::_int_mm_out(out, A.contiguous(), B.t());
    } else {  // float64 sums of int8 products are exact at these lengths (kMaxK)
      out.copy_(at::mm(A.to(at::kDouble), B.to(at::kDouble).t()));
    }
  }

  static void DequantizeProduct(const char*, const at::Tensor& A, const at::Tensor& row_stats,
                                const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias,
                                at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    at::Tensor v = (A.to(at::kFloat) * (row_stats.reshape({-1, 1}) * col_stats.reshape({1, -1}))) *
                   core::kInv127Squared;
    if (bias.has_value()) v = v + bias->to(at::kFloat);
    out.copy_(v);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CUDA, m) { Ops<Cuda>::Register(m); }

}  // namespace bnb::ops::int8
