// The 4-bit ops on CUDA: bnb/jit's NVRTC templates (kernels/blockwise4.cuh), on torch's current stream.
#include <c10/core/DeviceGuard.h>

#include <map>
#include <mutex>
#include <utility>

#include "bnb/jit/blockwise4.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/ops/blockwise4/ops.h"
#include "bnb/ops/common/cuda_launch.h"

namespace bnb::ops::blockwise4 {
namespace {

// The 16 values of a 4-bit type on `device`: the kernels read them from device memory. Made once per device and
// type, so no call pays a host-to-device copy; never freed (a CUDA free during process exit can crash).
const float* CodeOnDevice(core::Quant4 q, const at::Device& device) {
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<int, int>, at::Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  at::Tensor& t = (*cache)[{device.index(), static_cast<int>(q)}];
  if (!t.defined()) {
    const auto& values = core::Code4(q);
    t = at::tensor(at::ArrayRef<float>(values.data(), values.size())).to(device);
  }
  return t.data_ptr<float>();
}

struct Cuda {
  static constexpr bool kIsMeta = false;

  static void Quantize(const char* op, const at::Tensor& A, core::Quant4 q, int64_t blocksize, core::DType dtype,
                       at::Tensor& bytes, at::Tensor& absmax) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor x = A.contiguous();
    ThrowIfLaunchFailed(op, jit::LaunchQuantizeBlockwise4(jit::KernelCache::Global(), A.get_device(), dtype, q,
                                                          x.data_ptr(), bytes.data_ptr<uint8_t>(),
                                                          absmax.data_ptr<float>(), x.numel(), blocksize,
                                                          CurrentCudaStream(A), CudaThreadsPerBlock(op)));
  }

  static void Dequantize(const char* op, const at::Tensor& packed, const at::Tensor& absmax, core::Quant4 q,
                         int64_t blocksize, core::DType out_type, at::Tensor& out) {
    const c10::DeviceGuard guard(packed.device());
    const at::Tensor am = absmax.contiguous();
    ThrowIfLaunchFailed(op, jit::LaunchDequantizeBlockwise4(jit::KernelCache::Global(), packed.get_device(), out_type,
                                                            packed.data_ptr<uint8_t>(),
                                                            CodeOnDevice(q, packed.device()), am.data_ptr<float>(),
                                                            out.data_ptr(), out.numel(), blocksize,
                                                            CurrentCudaStream(packed), CudaThreadsPerBlock(op)));
  }

  static void Gemv(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                   const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
    const c10::DeviceGuard guard(A.device());
    const core::DType dtype = FloatDType(op, "A", A.scalar_type());
    const at::Tensor a = A.contiguous(), am = absmax.contiguous(), c = code.contiguous();
    ThrowIfLaunchFailed(op, jit::LaunchGemv4(jit::KernelCache::Global(), A.get_device(), dtype, a.data_ptr(),
                                             packed.data_ptr<uint8_t>(), am.data_ptr<float>(), c.data_ptr<float>(),
                                             out.data_ptr(), N, K, blocksize, CurrentCudaStream(A)));
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CUDA, m) { Ops<Cuda>::Register(m); }

}  // namespace bnb::ops::blockwise4
