// bnbdev's current device and streams (the DeviceGuard implementation torch's dispatcher, autograd engine and
// torch.accelerator use), and the PrivateUse1 hooks (is it built, available, which device a pointer is on). One stream
// per device and every op synchronous: events are complete as soon as they are recorded.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstring>

#include "bnb/tests/device/device.h"

namespace bnbdev {
namespace {

thread_local c10::DeviceIndex current_device = 0;

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

c10::Stream DefaultStream(c10::Device d) { return c10::Stream(c10::Stream::DEFAULT, d); }

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }
  // A device without an index ("bnbdev") means the current one: nothing changes.
  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::Device old(kType, CurrentDevice());
    if (d.has_index()) SetCurrentDevice(d.index());
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, CurrentDevice()); }
  void setDevice(c10::Device d) const override {
    if (d.has_index()) SetCurrentDevice(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kDeviceCount) current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override { return DefaultStream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return DefaultStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return DefaultStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return DefaultStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return DefaultStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }
  // Synchronous device: nothing to record, wait for or destroy.
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return kDeviceCount; }
  void setCurrentDevice(c10::DeviceIndex d) const override { SetCurrentDevice(d); }
  c10::DeviceIndex getCurrentDevice() const override { return CurrentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const c10::DeviceIndex old = CurrentDevice();
    SetCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  // Storage.resize_() of a device tensor's storage: a new block of the device's, the old bytes copied over.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::DataPtr fresh = DeviceAllocator()->allocate(newsize);
    const size_t keep = std::min(newsize, storage.nbytes());
    if (keep > 0) std::memcpy(fresh.get(), storage.data(), keep);
    storage.set_data_ptr_noswap(std::move(fresh));
    storage.set_nbytes(newsize);
  }
};

Hooks hooks;

// Registered when the library loads: torch reads the hooks (torch.accelerator, is_available) before any op runs.
const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

}  // namespace

c10::DeviceIndex CurrentDevice() { return current_device; }

void SetCurrentDevice(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "bnbdev: no device ", static_cast<int>(index), "; there are ",
              static_cast<int>(kDeviceCount), " (0 and 1)");
  current_device = index;
}

}  // namespace bnbdev

C10_REGISTER_GUARD_IMPL(PrivateUse1, bnbdev::GuardImpl);
