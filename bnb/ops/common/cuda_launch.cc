#include "bnb/ops/common/cuda_launch.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "bnb/core/config.h"
#include "bnb/ops/common/checks.h"

namespace bnb::ops {

void* CurrentCudaStream(const at::Tensor& t) {
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device());
  return reinterpret_cast<void*>(stream.native_handle());
}

void ThrowIfLaunchFailed(const char* op, const absl::Status& st) {
  TORCH_CHECK(st.ok(), "bnb::", op, " (CUDA): ", std::string(st.message()));
}

int CudaThreadsPerBlock(const char* op) {
  absl::StatusOr<int64_t> threads = bnb::core::Config::Global().GetInt("cuda.threads_per_block");
  ThrowIfError(op, threads.status());
  return static_cast<int>(*threads);
}

int CudaOptim8PerThread(const char* op) {
  absl::StatusOr<int64_t> per = bnb::core::Config::Global().GetInt("cuda.optim8_per_thread");
  ThrowIfError(op, per.status());
  return static_cast<int>(*per);
}

}  // namespace bnb::ops
