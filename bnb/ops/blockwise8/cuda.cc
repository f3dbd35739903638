// The blockwise 8-bit ops on CUDA: bnb/jit's NVRTC templates (kernels/blockwise8.cuh), on torch's current stream.
#include <c10/core/DeviceGuard.h>

#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/ops/blockwise8/ops.h"
#include "bnb/ops/common/cuda_launch.h"

namespace bnb::ops::blockwise8 {
namespace {

struct Cuda {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize,
                       core::DType dtype, at::Tensor& codes, at::Tensor& absmax) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor x = A.contiguous(), c = code.contiguous();
    // The prepared codebook, from torch's caching allocator on the current stream (freed after the launches, its
    // memory is reused only by work ordered after them).
    at::Tensor scratch = at::empty({jit::kQuantizeBlockwise8ScratchBytes}, A.options().dtype(at::kByte));
    ThrowIfLaunchFailed(op, jit::LaunchQuantizeBlockwise8(jit::KernelCache::Global(), A.get_device(), dtype,
                                                          x.data_ptr(), c.data_ptr<float>(), codes.data_ptr<uint8_t>(),
                                                          absmax.data_ptr<float>(), scratch.data_ptr(), x.numel(),
                                                          blocksize, CurrentCudaStream(A), CudaThreadsPerBlock(op)));
  }

  static void Dequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor a = A.contiguous(), am = absmax.contiguous(), c = code.contiguous();
    ThrowIfLaunchFailed(op, jit::LaunchDequantizeBlockwise8(jit::KernelCache::Global(), A.get_device(), out_type,
                                                            a.data_ptr<uint8_t>(), c.data_ptr<float>(),
                                                            am.data_ptr<float>(), out.data_ptr(), a.numel(),
                                                            blocksize, CurrentCudaStream(A),
                                                            CudaThreadsPerBlock(op)));
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CUDA, m) { Ops<Cuda>::Register(m); }

}  // namespace bnb::ops::blockwise8
