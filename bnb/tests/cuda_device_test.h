// The GoogleTest fixture of the jit stack's GPU tests: skips, with the reason, where the driver, NVRTC or a device
// is missing; makes device 0's primary context current; frees the test's device buffers afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bnb/jit/cuda/driver.h"
#include "bnb/jit/cuda/nvrtc.h"
#include "bnb/jit/cuda/runtime.h"
#include "gtest/gtest.h"

namespace bnb::tests {

class CudaDeviceTest : public ::testing::Test {
 public:
  void SetUp() override {
    absl::StatusOr<const jit::cuda::CudaDriver*> d = jit::cuda::GetCudaDriver();
    if (!d.ok()) GTEST_SKIP() << std::string(d.status().message());
    absl::StatusOr<const jit::cuda::Nvrtc*> nv = jit::cuda::GetNvrtc();
    if (!nv.ok()) GTEST_SKIP() << std::string(nv.status().message());
    int count = 0;
    if ((*d)->cuDeviceGetCount(&count) != 0 || count == 0) GTEST_SKIP() << "no CUDA device";
    d_ = *d;
    absl::StatusOr<jit::cuda::CUcontext> ctx = jit::cuda::PrimaryContext(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ASSERT_EQ(d_->cuCtxSetCurrent(*ctx), 0);
  }
  void TearDown() override {
    if (d_ == nullptr) return;
    for (jit::cuda::CUdeviceptr p : allocs_) d_->cuMemFree(p);
  }
  // A device buffer of `bytes` (+ slack) starting `offset` bytes past an allocation (which is 256-byte aligned),
  // holding `p` if given (nullptr: left uninitialized).
  jit::cuda::CUdeviceptr Upload(const void* p, size_t bytes, size_t offset = 0) {
    jit::cuda::CUdeviceptr ptr = 0;
    EXPECT_EQ(d_->cuMemAlloc(&ptr, bytes + offset + 64), 0);
    allocs_.push_back(ptr);
    if (p != nullptr && bytes > 0) {
      EXPECT_EQ(d_->cuMemcpyHtoD(ptr + offset, p, bytes), 0);
    }
    return ptr + offset;
  }
  std::vector<uint8_t> Download(jit::cuda::CUdeviceptr p, size_t bytes) {
    std::vector<uint8_t> v(bytes);
    if (bytes > 0) {
      EXPECT_EQ(d_->cuMemcpyDtoH(v.data(), p, bytes), 0);
    }
    return v;
  }

  const jit::cuda::CudaDriver* d_ = nullptr;
  std::vector<jit::cuda::CUdeviceptr> allocs_;
};

}  // namespace bnb::tests
