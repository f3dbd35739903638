// The blockwise 8-bit ops on the CPU: bnb/core's kernels over torch's thread pool.
#include <memory>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/ops/blockwise8/ops.h"
#include "bnb/ops/common/cpu_parallel.h"

namespace bnb::ops::blockwise8 {
namespace {

std::shared_ptr<const core::PreparedCodebook> PrepareCode(const char* op, const at::Tensor& code) {
  const at::Tensor c = code.contiguous();
  auto cb = core::PrepareCodebookCached(c.data_ptr<float>(), c.numel());
  ThrowIfError(op, cb.status());
  return *cb;
}

struct Cpu {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize,
                       core::DType dtype, at::Tensor& codes, at::Tensor& absmax) {
    const at::Tensor x = A.contiguous();
    const int64_t n = x.numel();
    const auto cb = PrepareCode(op, code);
    const void* xp = x.data_ptr();
    uint8_t* cp = codes.data_ptr<uint8_t>();
    float* ap = absmax.data_ptr<float>();
    ParallelOverBlocks(op, absmax.numel(), blocksize, [&](int64_t b0, int64_t b1) {
      core::QuantizeBlockwise8(dtype, xp, *cb, core::Blockwise8Range{n, blocksize, b0, b1}, cp, ap);
    }, kQuantizeCost);
  }

  static void Dequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    const at::Tensor a = A.contiguous(), am = absmax.contiguous();
    const auto cb = PrepareCode(op, code);
    const int64_t n = a.numel();
    const uint8_t* ap = a.data_ptr<uint8_t>();
    const float* amp = am.data_ptr<float>();
    void* op_out = out.data_ptr();
    ParallelOverBlocks(op, core::NumBlocks(n, blocksize), blocksize, [&](int64_t b0, int64_t b1) {
      core::DequantizeBlockwise8(out_type, ap, amp, *cb, core::Blockwise8Range{n, blocksize, b0, b1}, op_out);
    });
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { Ops<Cpu>::Register(m); }

}  // namespace bnb::ops::blockwise8
