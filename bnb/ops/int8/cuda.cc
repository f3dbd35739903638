// The LLM.int8() ops on CUDA: bnb/jit's NVRTC templates (kernels/int8.cuh) for the quantize, dequantize and epilogue
// passes, on torch's current stream; the int8 product by at::_int_mm (cuBLASLt), other shapes padded to its rules,
// except up to 16 rows with a dequantized result (int8_scaled_mm), which take one pass of kernels/int8.cuh.
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstdint>

#include "bnb/jit/int8.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/ops/common/cuda_launch.h"
#include "bnb/ops/int8/ops.h"

namespace bnb::ops::int8 {
namespace {

struct Cuda {
  static constexpr bool kIsMeta = false;

  static c10::optional<at::Tensor> QuantizeRows(const char* op, const at::Tensor& A, double threshold,
                                                at::Tensor& codes, at::Tensor& stats) {
    const c10::DeviceGuard guard(A.device());
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor x = A.contiguous();
    const int64_t K = A.size(-1);
    const float t = static_cast<float>(threshold);
    // The kernel flags outliers only under a threshold: without one, no flags (nor their zeroing launch). One row
    // (a decode step): the kernel writes every flag and zeroes its outliers' codes itself, two launches fewer.
    const bool outliers = t > 0.0f, one_row = stats.numel() == 1;
    at::Tensor flags = !outliers ? at::Tensor()
                       : one_row ? at::empty({K}, A.options().dtype(at::kByte))
                                 : at::zeros({K}, A.options().dtype(at::kByte));
    ThrowIfLaunchFailed(op, jit::LaunchInt8QuantizeRows(jit::KernelCache::Global(), A.get_device(), dtype,
                                                        x.data_ptr(), stats.numel(), K, t, codes.data_ptr<int8_t>(),
                                                        stats.data_ptr<float>(),
                                                        outliers ? flags.data_ptr<uint8_t>() : nullptr,
                                                        CurrentCudaStream(A), CudaThreadsPerBlock(op)));
    if (!outliers) return c10::nullopt;
    const at::Tensor cols = flags.nonzero().view({-1});  // ascending
    if (!one_row) Rows(codes).index_fill_(1, cols, 0);    // every code of an outlier column is 0
    return cols;
  }

  static void QuantizeColumns(const char* op, const at::Tensor& A, double threshold, at::Tensor& col_codes,
                              at::Tensor& col_stats) {
    const c10::DeviceGuard guard(A.device());
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor x = A.contiguous();
    col_stats.zero_();  // the column maxima start at 0 (their bits, merged by atomicMax)
    ThrowIfLaunchFailed(op, jit::LaunchInt8QuantizeColumns(jit::KernelCache::Global(), A.get_device(), dtype,
                                                           x.data_ptr(), NumRows(A), A.size(-1),
                                                           static_cast<float>(threshold), col_stats.data_ptr<float>(),
                                                           col_codes.data_ptr<int8_t>(), CurrentCudaStream(A),
                                                           CudaThreadsPerBlock(op)));
  }

  static void DequantizeRows(const char* op, const at::Tensor& A, const at::Tensor& stats, at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor a = A.contiguous(), s = stats.contiguous();
    ThrowIfLaunchFailed(op, jit::LaunchInt8DequantizeRows(jit::KernelCache::Global(), A.get_device(),
                                                          a.data_ptr<int8_t>(), s.data_ptr<float>(), NumRows(a),
                                                          a.size(-1), out.data_ptr<float>(), CurrentCudaStream(A),
                                                          CudaThreadsPerBlock(op)));
  }

  static void Matmul(const char*, const at::Tensor& A, const at::Tensor& B, at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    if (M == 0 || N == 0) return;
    if (K == 0) {
      out.zero_();
      return;
    }
    // at::_int_mm's rules on CUDA: more than 16 rows, K and N multiples of 8. Other shapes are padded with zero
    // rows and columns, which add nothing to the exact int32 sums: a decode step's single row takes one cuBLASLt
    // product of 17 rows that reads the weight once (a float64 product, as before, converted the whole weight on
    // every call). cuBLASLt also wants 16-byte aligned operands: a view that starts mid-vector goes the same way.
    const int64_t Mp = std::max<int64_t>(M, 17), Kp = (K + 7) / 8 * 8, Np = (N + 7) / 8 * 8;
    const at::Tensor a0 = A.contiguous();
    const auto is_aligned = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
    const bool aligned = is_aligned(a0) && is_aligned(B) && is_aligned(out);
    if (Mp == M && Kp == K && Np == N && aligned) {
      at::_int_mm_out(out, a0, B.t());
      return;
    }
    at::Tensor a = A, b = B;
    if (Mp != M || Kp != K || !aligned) {
      a = at::zeros({Mp, Kp}, A.options());
      a.narrow(0, 0, M).narrow(1, 0, K).copy_(A);
    }
    if (Kp != K || Np != N || !aligned) {
      b = at::zeros({Np, Kp}, B.options());
      b.narrow(0, 0, N).narrow(1, 0, K).copy_(B);
    }
    const at::Tensor full = at::_int_mm(a.contiguous(), b.t());
    out.copy_(full.narrow(0, 0, M).narrow(1, 0, N));
  }

  // A few rows (a decode step, a small batch): one pass over B's codes that multiplies and dequantizes
  // (kernels/int8.cuh int8_scaled_gemv) instead of a padded cuBLASLt product, its int32 result and the epilogue.
  static bool ScaledMatmul(const char* op, const at::Tensor& A, const at::Tensor& B, const at::Tensor& row_stats,
                           const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias, at::Tensor& out) {
    const int64_t M = A.size(0), K = A.size(1), N = B.size(0);
    if (!A.is_contiguous() || !B.is_contiguous() ||
        !jit::Int8ScaledGemvFits(M, K, A.data_ptr<int8_t>(), B.data_ptr<int8_t>())) {
      return false;
    }
    const c10::DeviceGuard guard(A.device());
    const core::DType out_type = FloatDType(op, "dtype", out.scalar_type());
    const at::Tensor rs = row_stats.contiguous(), cs = col_stats.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::DType bias_type = b.defined() ? FloatDType(op, "bias", b.scalar_type()) : core::DType::kFloat32;
    ThrowIfLaunchFailed(op, jit::LaunchInt8ScaledGemv(jit::KernelCache::Global(), A.get_device(),
                                                      A.data_ptr<int8_t>(), B.data_ptr<int8_t>(), rs.data_ptr<float>(),
                                                      cs.data_ptr<float>(), bias_type,
                                                      b.defined() ? b.data_ptr() : nullptr, M, N, K, out_type,
                                                      out.data_ptr(), CurrentCudaStream(A), CudaThreadsPerBlock(op)));
    return true;
  }

  // The outlier columns of the weight in one launch (where index_select, a float32 pass and a conversion took three).
  static at::Tensor DequantizeColumns(const char* op, const at::Tensor& codes, const at::Tensor& stats,
                                      const at::Tensor& cols, c10::ScalarType dtype) {
    const c10::DeviceGuard guard(codes.device());
    const core::DType out_type = FloatDType(op, "dtype", dtype);
    const at::Tensor c = codes.contiguous(), s = stats.contiguous(), idx = cols.contiguous();
    at::Tensor out = at::empty({c.size(0), idx.numel()}, codes.options().dtype(dtype));
    ThrowIfLaunchFailed(op, jit::LaunchInt8DequantizeColumns(jit::KernelCache::Global(), codes.get_device(), out_type,
                                                             c.data_ptr<int8_t>(), c.size(0), c.size(1),
                                                             s.data_ptr<float>(), idx.data_ptr<int64_t>(), idx.numel(),
                                                             out.data_ptr(), CurrentCudaStream(codes),
                                                             CudaThreadsPerBlock(op)));
    return out;
  }

  static void DequantizeProduct(const char* op, const at::Tensor& A, const at::Tensor& row_stats,
                                const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias,
                                at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const core::DType out_type = FloatDType(op, "dtype", out.scalar_type());
    const at::Tensor a = A.contiguous(), rs = row_stats.contiguous(), cs = col_stats.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::DType bias_type = b.defined() ? FloatDType(op, "bias", b.scalar_type()) : core::DType::kFloat32;
    ThrowIfLaunchFailed(op, jit::LaunchInt8DequantizeProduct(
                                jit::KernelCache::Global(), A.get_device(), a.data_ptr<int32_t>(),
                                rs.data_ptr<float>(), cs.data_ptr<float>(), bias_type,
                                b.defined() ? b.data_ptr() : nullptr, NumRows(a), a.size(-1), out_type,
                                out.data_ptr(), CurrentCudaStream(A), CudaThreadsPerBlock(op)));
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CUDA, m) { Ops<Cuda>::Register(m); }

}  // namespace bnb::ops::int8
