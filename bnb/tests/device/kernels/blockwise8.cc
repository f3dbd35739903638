// bnb's blockwise 8-bit ops on bnbdev, out of bnb's tree: bnb/ops/blockwise8/ops.h gives the checks, shapes and
// outputs, this Backend the kernels. bnbdev's memory is host memory, so they are bnb/core's CPU kernels, here on one
// thread over all blocks (a vendor would launch its own).
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/ops/blockwise8/ops.h"
#include "bnb/tests/device/kernels/calls.h"

namespace bnbdev_kernels {
namespace {

namespace core = bnb::core;

std::shared_ptr<const core::PreparedCodebook> Codebook(const char* op, const at::Tensor& code) {
  const at::Tensor c = code.contiguous();
  auto cb = core::PrepareCodebookCached(c.data_ptr<float>(), c.numel());
  bnb::ops::ThrowIfError(op, cb.status());
  return *cb;
}

struct Bnbdev {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize,
                       core::DType dtype, at::Tensor& codes, at::Tensor& absmax) {
    CountCall(op);
    const at::Tensor x = A.contiguous();
    const core::Blockwise8Range all{x.numel(), blocksize, 0, absmax.numel()};
    core::QuantizeBlockwise8(dtype, x.data_ptr(), *Codebook(op, code), all, codes.data_ptr<uint8_t>(),
                             absmax.data_ptr<float>());
  }

  static void Dequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    CountCall(op);
    const at::Tensor a = A.contiguous(), am = absmax.contiguous();
    const core::Blockwise8Range all{a.numel(), blocksize, 0, core::NumBlocks(a.numel(), blocksize)};
    core::DequantizeBlockwise8(out_type, a.data_ptr<uint8_t>(), am.data_ptr<float>(), *Codebook(op, code), all,
                               out.data_ptr());
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, PrivateUse1, m) { bnb::ops::blockwise8::Ops<Bnbdev>::Register(m); }

}  // namespace bnbdev_kernels
