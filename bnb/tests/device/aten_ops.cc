// The accelerator-integration guide's minimal op set for bnbdev: allocation, views, resizing, copies to and from the
// CPU, reading one value, and set_; and _has_compatible_shallow_copy_type, which nn.Module.to() needs. Everything
// else reaches fallback.cc. The memory is host memory, so copies run
// the CPU's copy over CPU views of the same bytes.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "bnb/tests/device/device.h"

namespace bnbdev {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

void CheckFactoryOptions(const char* op, c10::Device device, std::optional<c10::Layout> layout,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(device.is_privateuseone(), "bnbdev: ", op, " called for device ", device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "bnbdev: ", op, ": only strided tensors, got ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "bnbdev: ", op, ": pinned memory is a CPU tensor's");
}

at::Tensor Empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                 std::optional<c10::Device> device, std::optional<bool> pin_memory,
                 std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device d = c10::device_or_default(device);
  CheckFactoryOptions("empty.memory_format", d, layout, pin_memory);
  const c10::DeviceGuard guard(d);  // the allocator tags memory with the current device
  return at::detail::empty_generic(size, DeviceAllocator(), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                        std::optional<bool> pin_memory) {
  const c10::Device d = c10::device_or_default(device);
  CheckFactoryOptions("empty_strided", d, layout, pin_memory);
  const c10::DeviceGuard guard(d);
  return at::detail::empty_strided_generic(size, stride, DeviceAllocator(), kKeys, c10::dtype_or_default(dtype));
}

at::Tensor AsStrided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                     std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           offset);
}

at::Tensor View(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor ReshapeAlias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

// Grows the storage through its own allocator (the device's), as the CPU's resize_ does.
const at::Tensor& Resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

// A CPU tensor over t's bytes (the device's memory is host memory).
at::Tensor HostView(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// copy_ comes here whenever either side is a bnbdev tensor: CPU -> device, device -> CPU, device -> device.
at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.is_cpu() || self.is_privateuseone(), "bnbdev: no copies from ", self.device(), " (only the CPU)");
  TORCH_CHECK(dst.is_cpu() || dst.is_privateuseone(), "bnbdev: no copies to ", dst.device(), " (only the CPU)");
  at::Tensor to = dst.is_cpu() ? dst : HostView(dst);
  to.copy_(self.is_cpu() ? self : HostView(self), non_blocking);
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return CopyFrom(self, dst, false);
}

at::Scalar LocalScalarDense(const at::Tensor& self) { return at::native::_local_scalar_dense_cpu(HostView(self)); }

at::Tensor& SetTensor(at::Tensor& self, const at::Tensor& source) { return at::native::set_tensor_(self, source); }

at::Tensor& SetStorage(at::Tensor& self, at::Storage source) { return at::native::set_(self, source); }

at::Tensor& SetStorageOffset(at::Tensor& self, at::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                             c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

// Whether `self` may take `from`'s data (param.data = t, which nn.Module.to() does): CPU and bnbdev tensors are both
// dense host memory. torch knows this only for its own backends and asks a PrivateUse1 device (TensorImpl.h).
bool HasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone()) && !t.is_quantized();
  };
  return dense(self) && dense(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", Empty);
  m.impl("empty_strided", EmptyStrided);
  m.impl("as_strided", AsStrided);
  m.impl("view", View);
  m.impl("_reshape_alias", ReshapeAlias);
  m.impl("resize_", Resize);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
  m.impl("set_.source_Tensor", SetTensor);
  m.impl("set_.source_Storage", SetStorage);
  m.impl("set_.source_Storage_storage_offset", SetStorageOffset);
  m.impl("_has_compatible_shallow_copy_type", HasCompatibleShallowCopyType);  // beyond the minimal set: see above
}

}  // namespace bnbdev
