// bnbdev: a PrivateUse1 test device for bnb's tests. Its memory is host memory behind an allocator of its own; it
// has two devices and one stream each, and runs every op synchronously. The pieces, one file each: allocator.cc
// (memory), guard.cc (current device, streams, PrivateUse1 hooks), aten_ops.cc (the accelerator-integration guide's
// minimal op set), fallback.cc (every other aten op on the CPU, but for a deny list), control_ops.cc (what the tests
// read and set: torch.ops.bnbdev.*).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bnbdev {

constexpr c10::DeviceIndex kDeviceCount = 2;

// The calling thread's current device (0 until set), as CUDA's is per thread.
c10::DeviceIndex CurrentDevice();
void SetCurrentDevice(c10::DeviceIndex index);  // raises naming the index when it is no device of ours

c10::Allocator* DeviceAllocator();

struct MemoryStats {
  int64_t live_bytes = 0;   // held by tensors now
  int64_t live_blocks = 0;
  int64_t allocations = 0;  // ever made
};
MemoryStats GetMemoryStats();

// The CPU fallback's deny list: "aten::name" or "aten::name.overload" (see fallback.cc).
void SetFallbackDenied(const std::string& op, bool denied);
std::vector<std::string> FallbackDenied();

}  // namespace bnbdev
