// quantize_blockwise(.out) / dequantize_blockwise(.out): argument checks and shape rules (shared by the real and the
// Meta kernels through kIsMeta), and the kernels: bnb/core on the CPU, bnb/jit's NVRTC templates on CUDA.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "bnb/core/blockwise8.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/ops/checks.h"
#include "bnb/ops/output_alloc.h"
#include "bnb/ops/cpu_parallel.h"
#include "bnb/ops/cuda_launch.h"

namespace bnb::ops {
namespace {

using bnb::core::Blockwise8Range;

void CheckCode(const char* op, const at::Tensor& code, const at::Tensor& A) {
  CheckDType(op, "code", code, at::kFloat);
  CheckNumel(op, "code", code, bnb::core::kCodebookSize, "one value per 8-bit code");
  CheckSameDevice(op, "code", code, A);
}

// absmax: one float per block of A, on A's device.
void CheckAbsmax(const char* op, const at::Tensor& absmax, const at::Tensor& A, int64_t blocksize) {
  CheckDType(op, "absmax", absmax, at::kFloat);
  CheckNumel(op, "absmax", absmax, NumBlocks(A.sym_numel(), blocksize), "one per block of A");
  CheckSameDevice(op, "absmax", absmax, A);
}

// The CUDA kernels take blocks of up to 4096 values, the CPU ones (and the Meta kernel of any other device) more.
absl::Status CheckBlocksize8(int64_t blocksize, const at::Tensor& A) {
  return bnb::core::CheckBlocksize(blocksize, A.is_cuda() ? bnb::core::kMaxBlocksize : bnb::core::kMaxCpuBlocksize8);
}

std::shared_ptr<const bnb::core::PreparedCodebook> PrepareCode(const char* op, const at::Tensor& code) {
  const at::Tensor c = code.contiguous();
  auto cb = bnb::core::PrepareCodebookCached(c.data_ptr<float>(), c.numel());
  ThrowIfError(op, cb.status());
  return *cb;
}

// Checks shared by both quantize overloads; returns A's element type.
bnb::core::DType CheckQuantizeArgs(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize) {
  const bnb::core::DType dtype = FloatDType(op, "A", A.scalar_type());
  ThrowIfError(op, CheckBlocksize8(blocksize, A));
  CheckNotEmpty(op, "A", A);
  CheckCode(op, code, A);
  return dtype;
}

// codes and absmax: contiguous, on A's device, of A's numel and one float per block.
void QuantizeInto(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize,
                  bnb::core::DType dtype, at::Tensor& codes, at::Tensor& absmax) {
  if (A.is_cuda()) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor x = A.contiguous();
    const at::Tensor c = code.contiguous();
    // The prepared codebook, from torch's caching allocator on the current stream (freed after the launches, its
    // memory is reused only by work ordered after them).
    at::Tensor scratch = at::empty({bnb::jit::kQuantizeBlockwise8ScratchBytes}, A.options().dtype(at::kByte));
    ThrowIfLaunchFailed(op, bnb::jit::LaunchQuantizeBlockwise8(
                                bnb::jit::KernelCache::Global(), A.get_device(), dtype, x.data_ptr(),
                                c.data_ptr<float>(), codes.data_ptr<uint8_t>(), absmax.data_ptr<float>(),
                                scratch.data_ptr(), x.numel(), blocksize, CurrentCudaStream(A),
                                CudaThreadsPerBlock(op)));
    return;
  }
  const at::Tensor x = A.contiguous();
  const int64_t n = x.numel();
  const auto cb = PrepareCode(op, code);
  const void* xp = x.data_ptr();
  uint8_t* cp = codes.data_ptr<uint8_t>();
  float* ap = absmax.data_ptr<float>();
  ParallelOverBlocks(op, absmax.numel(), blocksize, [&](int64_t b0, int64_t b1) {
    bnb::core::QuantizeBlockwise8(dtype, xp, *cb, Blockwise8Range{n, blocksize, b0, b1}, cp, ap);
  });
}

template <bool kIsMeta>
std::tuple<at::Tensor, at::Tensor> QuantizeBlockwise(const at::Tensor& A, const at::Tensor& code, int64_t blocksize) {
  constexpr const char* op = "quantize_blockwise";
  const bnb::core::DType dtype = CheckQuantizeArgs(op, A, code, blocksize);
  if constexpr (kIsMeta) {
    return {at::empty_symint(A.sym_sizes(), A.options().dtype(at::kByte)),
            at::empty_symint({NumBlocks(A.sym_numel(), blocksize)}, A.options().dtype(at::kFloat))};
  } else {
    at::Tensor codes = EmptyOutput(A.sizes(), A.options().dtype(at::kByte));
    at::Tensor absmax = at::empty({NumBlocks(A.sym_numel(), blocksize).expect_int()}, A.options().dtype(at::kFloat));
    QuantizeInto(op, A, code, blocksize, dtype, codes, absmax);
    return {codes, absmax};
  }
}

template <bool kIsMeta>
void QuantizeBlockwiseInto(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, at::Tensor& out,
                          at::Tensor& absmax) {
  constexpr const char* op = "quantize_blockwise_into";
  const bnb::core::DType dtype = CheckQuantizeArgs(op, A, code, blocksize);
  CheckOut(op, out, A.sym_sizes(), "A's shape", at::kByte, A);
  CheckAbsmax(op, absmax, A, blocksize);
  CheckWritable(op, "absmax", absmax);
  if constexpr (!kIsMeta) {
    // Each would be written through a temporary (FillOut) and the later copy clobber the other. Strided views
    // (TooHard to decide) count as sharing when they are views of one storage.
    const at::MemOverlapStatus overlap = at::get_overlap_status(out, absmax);
    TORCH_CHECK(overlap == at::MemOverlapStatus::No ||
                    (overlap == at::MemOverlapStatus::TooHard && !out.storage().is_alias_of(absmax.storage())),
                "bnb::", op, ": out and absmax share memory; pass separate tensors");
    FillOut(out, {&A, &code, &absmax}, [&](at::Tensor& codes) {
      FillOut(absmax, {&A, &code, &codes},
              [&](at::Tensor& am) { QuantizeInto(op, A, code, blocksize, dtype, codes, am); });
    });
  }
}

// Checks shared by both dequantize overloads; returns the output element type.
bnb::core::DType CheckDequantizeArgs(const char* op, const at::Tensor& A, const at::Tensor& absmax,
                                     const at::Tensor& code, int64_t blocksize, c10::ScalarType dtype) {
  const bnb::core::DType out_type = FloatDType(op, "dtype", dtype);
  CheckDType(op, "A", A, at::kByte);
  ThrowIfError(op, CheckBlocksize8(blocksize, A));
  CheckNotEmpty(op, "A", A);
  CheckAbsmax(op, absmax, A, blocksize);
  CheckCode(op, code, A);
  return out_type;
}

// out: contiguous, A's shape, on A's device.
void DequantizeInto(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                    int64_t blocksize, bnb::core::DType out_type, at::Tensor& out) {
  if (A.is_cuda()) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor a = A.contiguous(), am = absmax.contiguous(), c = code.contiguous();
    ThrowIfLaunchFailed(op, bnb::jit::LaunchDequantizeBlockwise8(
                                bnb::jit::KernelCache::Global(), A.get_device(), out_type, a.data_ptr<uint8_t>(),
                                c.data_ptr<float>(), am.data_ptr<float>(), out.data_ptr(), a.numel(), blocksize,
                                CurrentCudaStream(A), CudaThreadsPerBlock(op)));
    return;
  }
  const at::Tensor a = A.contiguous();
  const at::Tensor am = absmax.contiguous();
  const auto cb = PrepareCode(op, code);
  const int64_t n = a.numel();
  const uint8_t* ap = a.data_ptr<uint8_t>();
  const float* amp = am.data_ptr<float>();
  void* op_out = out.data_ptr();
  ParallelOverBlocks(op, bnb::core::NumBlocks(n, blocksize), blocksize, [&](int64_t b0, int64_t b1) {
    bnb::core::DequantizeBlockwise8(out_type, ap, amp, *cb, Blockwise8Range{n, blocksize, b0, b1}, op_out);
  });
}

template <bool kIsMeta>
at::Tensor DequantizeBlockwise(const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                               int64_t blocksize, c10::ScalarType dtype) {
  constexpr const char* op = "dequantize_blockwise";
  const bnb::core::DType out_type = CheckDequantizeArgs(op, A, absmax, code, blocksize, dtype);
  if constexpr (kIsMeta) {
    return at::empty_symint(A.sym_sizes(), A.options().dtype(dtype));
  } else {
    at::Tensor out = EmptyOutput(A.sizes(), A.options().dtype(dtype));
    DequantizeInto(op, A, absmax, code, blocksize, out_type, out);
    return out;
  }
}

template <bool kIsMeta>
void DequantizeBlockwiseOut(const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                            int64_t blocksize, c10::ScalarType dtype, at::Tensor& out) {
  constexpr const char* op = "dequantize_blockwise.out";
  const bnb::core::DType out_type = CheckDequantizeArgs(op, A, absmax, code, blocksize, dtype);
  CheckOut(op, out, A.sym_sizes(), "A's shape", dtype, A);
  if constexpr (!kIsMeta) {
    FillOut(out, {&A, &absmax, &code},
            [&](at::Tensor& dst) { DequantizeInto(op, A, absmax, code, blocksize, out_type, dst); });
  }
}

// The same kernels serve CPU and CUDA tensors (they branch on the device); Meta gets the shape-only instances.
template <bool kIsMeta>
void RegisterKernels(torch::Library& m) {
  m.impl("quantize_blockwise", &QuantizeBlockwise<kIsMeta>);
  m.impl("quantize_blockwise_into", &QuantizeBlockwiseInto<kIsMeta>);
  m.impl("dequantize_blockwise", &DequantizeBlockwise<kIsMeta>);
  m.impl("dequantize_blockwise.out", &DequantizeBlockwiseOut<kIsMeta>);
}

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { RegisterKernels<false>(m); }
TORCH_LIBRARY_IMPL(bnb, CUDA, m) { RegisterKernels<false>(m); }
TORCH_LIBRARY_IMPL(bnb, Meta, m) { RegisterKernels<true>(m); }

}  // namespace bnb::ops
