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

namespace {

int IntKnob(const char* op, const char* name) {
  absl::StatusOr<int64_t> v = bnb::core::Config::Global().GetInt(name);
  ThrowIfError(op, v.status());
  return static_cast<int>(*v);
}

}  // namespace

int CudaThreadsPerBlock(const char* op) { return IntKnob(op, "cuda.threads_per_block"); }

int CudaOptim8PerThread(const char* op) { return IntKnob(op, "cuda.optim8_per_thread"); }

}  // namespace bnb::ops
