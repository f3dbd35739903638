// bnb's 4-bit ops on bnbdev, out of bnb's tree: bnb/ops/blockwise4/ops.h gives the checks, shapes and outputs (and
// gemm_4bit, which dequantizes through the dispatcher: this library's dequantize_4bit serves it), this Backend the
// kernels: bnb/core's CPU kernels on bnbdev's host memory, on one thread.
#include "bnb/core/blockwise4.h"
#include "bnb/core/gemm4_packed.h"
#include "bnb/core/gemv4.h"
#include "bnb/ops/blockwise4/ops.h"
#include "bnb/tests/device/kernels/calls.h"

namespace bnbdev_kernels {
namespace {

namespace core = bnb::core;

struct Bnbdev {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, core::Quant4 q, int64_t blocksize, core::DType dtype,
                       at::Tensor& bytes, at::Tensor& absmax) {
    CountCall(op);
    const at::Tensor x = A.contiguous();
    const core::Blockwise4Range all{x.numel(), blocksize, 0, absmax.numel()};
    core::QuantizeBlockwise4(dtype, x.data_ptr(), q, all, bytes.data_ptr<uint8_t>(), absmax.data_ptr<float>());
  }

  static void Dequantize(const char* op, const at::Tensor& packed, const at::Tensor& absmax, core::Quant4 q,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    CountCall(op);
    const at::Tensor am = absmax.contiguous();
    const core::Blockwise4Range all{out.numel(), blocksize, 0, core::NumBlocks(out.numel(), blocksize)};
    core::DequantizeBlockwise4(out_type, packed.data_ptr<uint8_t>(), am.data_ptr<float>(), core::Code4(q).data(), all,
                               out.data_ptr());
  }

  static void Gemv(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                   const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
    CountCall(op);
    const core::DType dtype = bnb::ops::FloatDType(op, "A", A.scalar_type());
    const at::Tensor a = A.contiguous(), am = absmax.contiguous(), c = code.contiguous();
    core::Gemv4(dtype, a.data_ptr(), packed.data_ptr<uint8_t>(), am.data_ptr<float>(), c.data_ptr<float>(), N, K,
                blocksize, out.data_ptr(), 0, N);
  }

  static void Pack(const char* op, const at::Tensor& packed, int64_t N, int64_t K, const at::Tensor& absmax,
                   int64_t blocksize, at::Tensor& codes, at::Tensor& scales) {
    CountCall(op);
    const at::Tensor am = absmax.contiguous();
    core::Pack4(packed.data_ptr<uint8_t>(), am.data_ptr<float>(), N, K, blocksize, codes.data_ptr<uint8_t>(),
                scales.data_ptr<float>(), 0, core::Packed4Tiles(N));
  }

  static void Unpack(const char* op, const at::Tensor& codes, int64_t N, int64_t K, at::Tensor& out) {
    CountCall(op);
    core::Unpack4(codes.data_ptr<uint8_t>(), N, K, out.data_ptr<uint8_t>(), 0, core::Packed4Tiles(N));
  }

  // bnb/core's kernel where it has one (the default cpu.gemv_bf16_products); else ops.h composes the product.
  static bool GemmPacked(const char* op, const at::Tensor& A, const at::Tensor& codes, const at::Tensor& scales,
                         int64_t N, int64_t K, int64_t blocksize, const at::Tensor& code,
                         const c10::optional<at::Tensor>& bias, bool int8_activations, at::Tensor& out) {
    CountCall(op);
    const core::DType dtype = bnb::ops::FloatDType(op, "A", A.scalar_type());
    const int64_t M = A.numel() / K;
    if (int8_activations ? !core::Gemm4PackedInt8Runs() : !core::Gemm4PackedRuns(dtype, M)) return false;
    const at::Tensor a = A.contiguous(), c = code.contiguous(), cs = codes.contiguous(), ss = scales.contiguous();
    const at::Tensor b = bias.has_value() ? bias->contiguous() : at::Tensor();
    const core::Packed4 w{cs.data_ptr<uint8_t>(), ss.data_ptr<float>(), N, K, blocksize};
    const void* biasp = b.defined() ? b.data_ptr() : nullptr;
    if (int8_activations) {
      const std::array<int8_t, 16> values = bnb::ops::blockwise4::Int8CodeValuesOf(op, c);
      const core::Int8Activations act = core::QuantizeActivationsInt8(dtype, a.data_ptr(), M, K);
      core::Gemm4PackedInt8(dtype, act, w, values.data(), biasp, out.data_ptr(), 0, core::Packed4Tiles(N));
    } else {
      core::Gemm4Packed(dtype, a.data_ptr(), M, w, c.data_ptr<float>(), biasp, out.data_ptr(), 0,
                        core::Packed4Tiles(N));
    }
    return true;
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, PrivateUse1, m) { bnb::ops::blockwise4::Ops<Bnbdev>::Register(m); }

}  // namespace bnbdev_kernels
