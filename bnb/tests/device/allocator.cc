// bnbdev's memory: host memory from an allocator of its own (64-byte aligned), so a tensor's memory is known to be
// the device's (the tests count it), and CPU pointers can still read it (kernels may call bnb/core on it).
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "bnb/tests/device/device.h"

namespace bnbdev {
namespace {

std::mutex mu;
std::unordered_map<void*, size_t> live;  // block -> bytes, for the stats
MemoryStats stats;

void Free(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(p);
    TORCH_INTERNAL_ASSERT(it != live.end(), "bnbdev: freeing ", p, ", which bnbdev did not allocate");
    stats.live_bytes -= static_cast<int64_t>(it->second);
    stats.live_blocks -= 1;
    live.erase(it);
  }
  std::free(p);
}

struct HostMemoryAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    const c10::Device device(c10::DeviceType::PrivateUse1, CurrentDevice());
    if (n == 0) return {nullptr, nullptr, &Free, device};
    const size_t rounded = (n + 63) / 64 * 64;  // aligned_alloc takes whole multiples of the alignment
    void* p = std::aligned_alloc(64, rounded);
    TORCH_CHECK(p != nullptr, "bnbdev: out of memory allocating ", n, " bytes on ", device);
    std::lock_guard<std::mutex> lock(mu);
    live.emplace(p, n);
    stats.live_bytes += static_cast<int64_t>(n);
    stats.live_blocks += 1;
    stats.allocations += 1;
    return {p, p, &Free, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

HostMemoryAllocator allocator;

}  // namespace

c10::Allocator* DeviceAllocator() { return &allocator; }

MemoryStats GetMemoryStats() {
  std::lock_guard<std::mutex> lock(mu);
  return stats;
}

}  // namespace bnbdev

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, bnbdev::DeviceAllocator());
