// The 4-bit ops on the CPU: bnb/core's kernels over torch's thread pool.
#include "bnb/core/blockwise4.h"
#include "bnb/core/codebook.h"
#include "bnb/core/cpu_settings.h"
#include "bnb/core/gemv4.h"
#include "bnb/ops/blockwise4/ops.h"
#include "bnb/ops/common/cpu_parallel.h"

namespace bnb::ops::blockwise4 {
namespace {

struct Cpu {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, core::Quant4 q, int64_t blocksize, core::DType dtype,
                       at::Tensor& bytes, at::Tensor& absmax) {
    const at::Tensor x = A.contiguous();
    const int64_t n = x.numel();
    const void* xp = x.data_ptr();
    uint8_t* bp = bytes.data_ptr<uint8_t>();
    float* ap = absmax.data_ptr<float>();
    ParallelOverBlocks(op, absmax.numel(), blocksize, [&](int64_t b0, int64_t b1) {
      core::QuantizeBlockwise4(dtype, xp, q, core::Blockwise4Range{n, blocksize, b0, b1}, bp, ap);
    });
  }

  static void Dequantize(const char* op, const at::Tensor& packed, const at::Tensor& absmax, core::Quant4 q,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    const at::Tensor am = absmax.contiguous();
    const int64_t n = out.numel();
    const float* code16 = core::Code4(q).data();
    const uint8_t* bp = packed.data_ptr<uint8_t>();
    const float* ap = am.data_ptr<float>();
    void* op_out = out.data_ptr();
    ParallelOverBlocks(op, core::NumBlocks(n, blocksize), blocksize, [&](int64_t b0, int64_t b1) {
      core::DequantizeBlockwise4(out_type, bp, ap, code16, core::Blockwise4Range{n, blocksize, b0, b1}, op_out);
    });
  }

  static void Gemv(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                   const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
    const at::Tensor am = absmax.contiguous();
    const float* amp = am.data_ptr<float>();
    GemvRows(op, A, packed, N, K, code, out,
             [&](core::DType dtype, const void* ap, const uint8_t* bp, const float* cp, void* outp, int64_t r0,
                 int64_t r1, bool bf16_products) {
               core::Gemv4(dtype, ap, bp, amp, cp, N, K, blocksize, outp, r0, r1, bf16_products);
             });
  }

  // The kernel reads the nested statistics itself, a band of rows' scales at a time (core::Gemv4Nested): no
  // absmax array of the whole weight is made per call.
  static void GemvNested(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                         const at::Tensor& absmax, const Nested& nested, const at::Tensor& code, int64_t blocksize,
                         at::Tensor& out) {
    const at::Tensor am = absmax.contiguous();
    const at::Tensor q = nested.absmax_8bit->contiguous(), code8 = nested.absmax_code->contiguous();
    // The codebook rule dequantize_blockwise applies (every entry finite), with NestedScales' wording.
    const auto prepared = core::PrepareCodebookCached(code8.data_ptr<float>(), code8.numel());
    TORCH_CHECK(prepared.ok(), "bnb::", op, ": dequantizing absmax_8bit by absmax_code: ",
                prepared.status().message());
    const core::NestedAbsmax scales{q.data_ptr<uint8_t>(), code8.data_ptr<float>(), am.data_ptr<float>(),
                                    nested.absmax_offset->to(at::kFloat).item<float>()};
    GemvRows(op, A, packed, N, K, code, out,
             [&](core::DType dtype, const void* ap, const uint8_t* bp, const float* cp, void* outp, int64_t r0,
                 int64_t r1, bool bf16_products) {
               core::Gemv4Nested(dtype, ap, bp, scales, cp, N, K, blocksize, outp, r0, r1, bf16_products);
             });
  }

  // Runs rows(dtype, A, B, code, out, r0, r1, bf16_products) over torch's threads, split by rows.
  template <class Rows>
  static void GemvRows(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                       const at::Tensor& code, at::Tensor& out, const Rows& rows) {
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor a = A.contiguous(), c = code.contiguous();
    absl::StatusOr<core::CpuSettings> settings = core::CurrentCpuSettings();
    TORCH_CHECK(settings.ok(), "bnb::", op, ": ", settings.status().message());
    const void* ap = a.data_ptr();
    const uint8_t* bp = packed.data_ptr<uint8_t>();
    const float* cp = c.data_ptr<float>();
    void* outp = out.data_ptr();
    ParallelOverBlocks(op, N, K, [&](int64_t r0, int64_t r1) {
      rows(dtype, ap, bp, cp, outp, r0, r1, settings->gemv_bf16_products);
    });
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { Ops<Cpu>::Register(m); }

}  // namespace bnb::ops::blockwise4
