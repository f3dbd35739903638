// torch.ops.bnbdev.*: what tests read from the device and set on it, as ops, so the device library needs no Python
// binding of its own (torch.ops.load_library loads it).
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include "bnb/tests/device/device.h"

namespace bnbdev {
namespace {

// [live bytes, live blocks, allocations ever]
std::vector<int64_t> MemoryStatsOp() {
  const MemoryStats s = GetMemoryStats();
  return {s.live_bytes, s.live_blocks, s.allocations};
}

// Through the registered DeviceGuard implementation, as torch's own device code reaches it.
const c10::impl::DeviceGuardImplInterface& Guard() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
}

int64_t DeviceCountOp() { return Guard().deviceCount(); }

int64_t CurrentDeviceOp() { return Guard().getDevice().index(); }

void SetDeviceOp(int64_t index) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "bnbdev: no device ", index, "; there are ",
              static_cast<int>(kDeviceCount));
  Guard().setDevice(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index)));
}

void DenyFallbackOp(c10::string_view op, bool deny) { SetFallbackDenied(std::string(op), deny); }

std::vector<std::string> FallbackDeniedOp() { return FallbackDenied(); }

}  // namespace

TORCH_LIBRARY(bnbdev, m) {
  m.def("device_count() -> int", &DeviceCountOp);
  m.def("current_device() -> int", &CurrentDeviceOp);
  m.def("set_device(int index) -> ()", &SetDeviceOp);
  m.def("memory_stats() -> int[]", &MemoryStatsOp);
  m.def("deny_fallback(str op, bool deny=True) -> ()", &DenyFallbackOp);
  m.def("fallback_denied() -> str[]", &FallbackDeniedOp);
}

}  // namespace bnbdev
