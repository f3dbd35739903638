// quantize_4bit / dequantize_4bit(.out) / gemv_4bit(.out) / gemm_4bit: argument checks and shape rules (shared by
// the real and the Meta kernels through kIsMeta), and the kernels: bnb/core on the CPU, bnb/jit's NVRTC templates
// on CUDA.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/gemv4.h"
#include "bnb/jit/blockwise4.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/ops/checks.h"
#include "bnb/ops/output_alloc.h"
#include "bnb/ops/cpu_parallel.h"
#include "bnb/ops/cuda_launch.h"

namespace bnb::ops {
namespace {

using bnb::core::Blockwise4Range;
using bnb::core::Quant4;

Quant4 ParseQuantType(const char* op, c10::string_view quant_type) {
  auto q = bnb::core::ParseQuant4(std::string(quant_type));
  ThrowIfError(op, q.status());
  return *q;
}

c10::SymInt ShapeNumel(const char* op, const char* arg, at::IntArrayRef shape) {
  const int64_t n = CheckedNumel(op, arg, shape);
  TORCH_CHECK(n > 0, "bnb::", op, ": ", arg, " ", shape, " is empty; there is nothing to dequantize");
  return n;
}

// The dtypes packed codes may be viewed as: bitsandbytes' (uint8, or a float type that FSDP shards like the rest).
void CheckStorage(const char* op, const char* arg, c10::ScalarType storage) {
  TORCH_CHECK(storage == at::kByte || storage == at::kBFloat16 || storage == at::kHalf || storage == at::kFloat,
              "bnb::", op, ": ", arg, " must be uint8, bfloat16, float16 or float32 (packed codes), got ",
              DTypeName{storage});
}

// Packed bytes: (n + 1) / 2, which must fill whole elements of quant_storage.
c10::SymInt PackedElements(const char* op, const c10::SymInt& n, c10::ScalarType storage) {
  CheckStorage(op, "quant_storage", storage);
  const int64_t itemsize = static_cast<int64_t>(c10::elementSize(storage));
  const c10::SymInt bytes = (n + 1) / 2;
  TORCH_CHECK(bytes % itemsize == 0, "bnb::", op, ": ", n, " values pack into ", bytes, " bytes, not a whole number ",
              "of ", DTypeName{storage}, " (", itemsize, " bytes each); use uint8 storage or a size that divides");
  return bytes / itemsize;
}

void CheckPackedBytes(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& n) {
  CheckStorage(op, arg, t.scalar_type());
  const c10::SymInt bytes = t.sym_numel() * static_cast<int64_t>(t.element_size());
  TORCH_CHECK(bytes == (n + 1) / 2, "bnb::", op, ": ", arg, " holds ", bytes, " bytes of packed codes; ", n,
              " values need ", (n + 1) / 2);
}

void CheckAbsmax(const char* op, const at::Tensor& absmax, const at::Tensor& A, const c10::SymInt& n,
                 int64_t blocksize) {
  CheckDType(op, "absmax", absmax, at::kFloat);
  CheckNumel(op, "absmax", absmax, NumBlocks(n, blocksize), "one per block");
  CheckSameDevice(op, "absmax", absmax, A);
}

// The bytes of a packed tensor of any storage dtype, contiguous.
at::Tensor PackedBytes(const at::Tensor& t) { return t.contiguous().view(at::kByte).reshape({-1}); }

// The 16 values of a 4-bit type on `device`: the kernels read them from device memory. Made once per device and
// type, so no call pays a host-to-device copy; never freed (a CUDA free during process exit can crash).
const float* CodeOnDevice(Quant4 q, const at::Device& device) {
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<int, int>, at::Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  at::Tensor& t = (*cache)[{device.index(), static_cast<int>(q)}];
  if (!t.defined()) {
    const auto& values = bnb::core::Code4(q);
    t = at::tensor(at::ArrayRef<float>(values.data(), values.size())).to(device);
  }
  return t.data_ptr<float>();
}

template <bool kIsMeta>
std::tuple<at::Tensor, at::Tensor> Quantize4bit(const at::Tensor& A, int64_t blocksize, c10::string_view quant_type,
                                                c10::ScalarType quant_storage) {
  constexpr const char* op = "quantize_4bit";
  const bnb::core::DType dtype = FloatDType(op, "A", A.scalar_type());
  ThrowIfError(op, bnb::core::CheckBlocksize(blocksize));
  const Quant4 q = ParseQuantType(op, quant_type);
  CheckNotEmpty(op, "A", A);
  const c10::SymInt packed_rows = PackedElements(op, A.sym_numel(), quant_storage);
  if constexpr (kIsMeta) {
    return {at::empty_symint({packed_rows, 1}, A.options().dtype(quant_storage)),
            at::empty_symint({NumBlocks(A.sym_numel(), blocksize)}, A.options().dtype(at::kFloat))};
  } else if (A.is_cuda()) {
    const c10::DeviceGuard guard(A.device());
    const at::Tensor x = A.contiguous();
    const int64_t n = x.numel();
    at::Tensor bytes = at::empty({bnb::core::PackedSize4(n)}, A.options().dtype(at::kByte));
    at::Tensor absmax = at::empty({NumBlocks(n, blocksize).expect_int()}, A.options().dtype(at::kFloat));
    ThrowIfLaunchFailed(op, bnb::jit::LaunchQuantizeBlockwise4(
                                bnb::jit::KernelCache::Global(), A.get_device(), dtype, q, x.data_ptr(),
                                bytes.data_ptr<uint8_t>(), absmax.data_ptr<float>(), n, blocksize,
                                CurrentCudaStream(A), CudaThreadsPerBlock(op)));
    return {bytes.view(quant_storage).reshape({-1, 1}), absmax};
  } else {
    const at::Tensor x = A.contiguous();
    const int64_t n = x.numel();
    at::Tensor bytes = EmptyOutput({bnb::core::PackedSize4(n)}, A.options().dtype(at::kByte));
    at::Tensor absmax = at::empty({NumBlocks(n, blocksize).expect_int()}, A.options().dtype(at::kFloat));
    const void* xp = x.data_ptr();
    uint8_t* bp = bytes.data_ptr<uint8_t>();
    float* ap = absmax.data_ptr<float>();
    ParallelOverBlocks(op, absmax.numel(), blocksize, [&](int64_t b0, int64_t b1) {
      bnb::core::QuantizeBlockwise4(dtype, xp, q, Blockwise4Range{n, blocksize, b0, b1}, bp, ap);
    });
    return {bytes.view(quant_storage).reshape({-1, 1}), absmax};
  }
}

// Checks of both dequantize_4bit overloads; returns the output element type.
bnb::core::DType CheckDequantize4(const char* op, const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize,
                                  c10::string_view quant_type, at::IntArrayRef shape, c10::ScalarType dtype) {
  const bnb::core::DType out_type = FloatDType(op, "dtype", dtype);
  ThrowIfError(op, bnb::core::CheckBlocksize(blocksize));
  ParseQuantType(op, quant_type);
  const c10::SymInt n = ShapeNumel(op, "shape", shape);
  CheckPackedBytes(op, "A", A, n);
  CheckAbsmax(op, absmax, A, n, blocksize);
  return out_type;
}

// Dequantizes with the 4-bit type q into `out` (contiguous, n elements, on A's device).
void Dequantize4Into(const char* op, const at::Tensor& A, const at::Tensor& absmax, Quant4 q, int64_t blocksize,
                     bnb::core::DType out_type, at::Tensor& out) {
  const at::Tensor bytes = PackedBytes(A);
  const at::Tensor am = absmax.contiguous();
  const int64_t n = out.numel();
  if (A.is_cuda()) {
    const c10::DeviceGuard guard(A.device());
    ThrowIfLaunchFailed(op, bnb::jit::LaunchDequantizeBlockwise4(
                                bnb::jit::KernelCache::Global(), A.get_device(), out_type, bytes.data_ptr<uint8_t>(),
                                CodeOnDevice(q, A.device()), am.data_ptr<float>(), out.data_ptr(), n, blocksize,
                                CurrentCudaStream(A), CudaThreadsPerBlock(op)));
    return;
  }
  const float* code16 = bnb::core::Code4(q).data();
  const uint8_t* bp = bytes.data_ptr<uint8_t>();
  const float* ap = am.data_ptr<float>();
  void* op_out = out.data_ptr();
  ParallelOverBlocks(op, bnb::core::NumBlocks(n, blocksize), blocksize, [&](int64_t b0, int64_t b1) {
    bnb::core::DequantizeBlockwise4(out_type, bp, ap, code16, Blockwise4Range{n, blocksize, b0, b1}, op_out);
  });
}

template <bool kIsMeta>
at::Tensor Dequantize4bit(const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize,
                          c10::string_view quant_type, at::IntArrayRef shape, c10::ScalarType dtype) {
  constexpr const char* op = "dequantize_4bit";
  const bnb::core::DType out_type = CheckDequantize4(op, A, absmax, blocksize, quant_type, shape, dtype);
  if constexpr (kIsMeta) {
    return at::empty(shape, A.options().dtype(dtype));
  } else {
    at::Tensor out = EmptyOutput(shape, A.options().dtype(dtype));
    Dequantize4Into(op, A, absmax, ParseQuantType(op, quant_type), blocksize, out_type, out);
    return out;
  }
}

template <bool kIsMeta>
void Dequantize4bitOut(const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize, c10::string_view quant_type,
                       at::IntArrayRef shape, c10::ScalarType dtype, at::Tensor& out) {
  constexpr const char* op = "dequantize_4bit.out";
  const bnb::core::DType out_type = CheckDequantize4(op, A, absmax, blocksize, quant_type, shape, dtype);
  CheckOut(op, out, c10::fromIntArrayRefSlow(shape), "shape", dtype, A);
  if constexpr (!kIsMeta) {
    const Quant4 q = ParseQuantType(op, quant_type);
    FillOut(out, {&A, &absmax},
            [&](at::Tensor& dst) { Dequantize4Into(op, A, absmax, q, blocksize, out_type, dst); });
  }
}

// A's sizes with the last replaced by N: the output shape of gemv_4bit and gemm_4bit (symbolic under compile).
std::vector<c10::SymInt> RowsTimesN(const at::Tensor& A, int64_t N) {
  std::vector<c10::SymInt> shape(A.sym_sizes().begin(), A.sym_sizes().end() - 1);
  shape.emplace_back(N);
  return shape;
}

// Checks of both gemv_4bit overloads; returns the output shape.
std::vector<c10::SymInt> CheckGemv4(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                                const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize) {
  FloatDType(op, "A", A.scalar_type());
  TORCH_CHECK(A.dim() >= 1 && A.sym_numel() == A.sym_size(-1), "bnb::", op, ": A must be a single row (leading ",
              "dimensions of 1), got shape ", A.sym_sizes());
  TORCH_CHECK(shapeB.size() == 2 && shapeB[0] > 0 && shapeB[1] > 0, "bnb::", op, ": shapeB must be [N, K] with ",
              "N, K > 0, got ", shapeB);
  TORCH_CHECK(A.sym_size(-1) == shapeB[1], "bnb::", op, ": A has ", A.sym_size(-1), " columns but shapeB ",
              shapeB, " needs ", shapeB[1]);
  ThrowIfError(op, bnb::core::CheckBlocksize(blocksize));
  const c10::SymInt n = CheckedNumel(op, "shapeB", shapeB);
  CheckPackedBytes(op, "B", B, n);
  CheckSameDevice(op, "B", B, A);
  CheckAbsmax(op, absmax, A, n, blocksize);
  CheckDType(op, "code", code, at::kFloat);
  CheckNumel(op, "code", code, bnb::core::kCodebook4Size, "the 16 values of the 4-bit type");
  CheckSameDevice(op, "code", code, A);
  return RowsTimesN(A, shapeB[0]);
}

void Gemv4Into(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
               const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
  const bnb::core::DType dtype = FloatDType(op, "A", A.scalar_type());
  const at::Tensor a = A.contiguous(), bytes = PackedBytes(B), am = absmax.contiguous(), c = code.contiguous();
  const int64_t N = shapeB[0], K = shapeB[1];
  if (A.is_cuda()) {
    const c10::DeviceGuard guard(A.device());
    ThrowIfLaunchFailed(op, bnb::jit::LaunchGemv4(bnb::jit::KernelCache::Global(), A.get_device(), dtype, a.data_ptr(),
                                                  bytes.data_ptr<uint8_t>(), am.data_ptr<float>(), c.data_ptr<float>(),
                                                  out.data_ptr(), N, K, blocksize, CurrentCudaStream(A)));
    return;
  }
  const void* ap = a.data_ptr();
  const uint8_t* bp = bytes.data_ptr<uint8_t>();
  const float* amp = am.data_ptr<float>();
  const float* cp = c.data_ptr<float>();
  void* outp = out.data_ptr();
  ParallelOverBlocks(op, N, K, [&](int64_t r0, int64_t r1) {
    bnb::core::Gemv4(dtype, ap, bp, amp, cp, N, K, blocksize, outp, r0, r1);
  });
}

template <bool kIsMeta>
at::Tensor Gemv4bit(const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB, const at::Tensor& absmax,
                    const at::Tensor& code, int64_t blocksize) {
  constexpr const char* op = "gemv_4bit";
  at::Tensor out = at::empty_symint(CheckGemv4(op, A, B, shapeB, absmax, code, blocksize), A.options());
  if constexpr (!kIsMeta) Gemv4Into(op, A, B, shapeB, absmax, code, blocksize, out);
  return out;
}

template <bool kIsMeta>
void Gemv4bitOut(const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB, const at::Tensor& absmax,
                 const at::Tensor& code, int64_t blocksize, at::Tensor& out) {
  constexpr const char* op = "gemv_4bit.out";
  const std::vector<c10::SymInt> shape = CheckGemv4(op, A, B, shapeB, absmax, code, blocksize);
  CheckOut(op, out, shape, "shape", A.scalar_type(), A);
  if constexpr (!kIsMeta) {
    FillOut(out, {&A, &B, &absmax, &code},
            [&](at::Tensor& dst) { Gemv4Into(op, A, B, shapeB, absmax, code, blocksize, dst); });
  }
}

template <bool kIsMeta>
at::Tensor Gemm4bit(const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB, const at::Tensor& absmax,
                    int64_t blocksize, c10::string_view quant_type, const c10::optional<at::Tensor>& bias,
                    const c10::optional<at::Tensor>& absmax_8bit, const c10::optional<at::Tensor>& absmax_code,
                    const c10::optional<at::Tensor>& absmax_offset) {
  constexpr const char* op = "gemm_4bit";
  const bnb::core::DType dtype = FloatDType(op, "A", A.scalar_type());
  TORCH_CHECK(shapeB.size() == 2, "bnb::", op, ": shapeB must be [N, K], got ", shapeB);
  TORCH_CHECK(A.dim() >= 1 && A.sym_size(-1) == shapeB[1], "bnb::", op, ": A's last dimension (",
              A.sym_sizes(), ") must equal shapeB[1] = ", shapeB[1]);
  ThrowIfError(op, bnb::core::CheckBlocksize(blocksize));
  const Quant4 q = ParseQuantType(op, quant_type);
  const c10::SymInt n = ShapeNumel(op, "shapeB", shapeB);
  CheckPackedBytes(op, "B", B, n);
  CheckDType(op, "absmax", absmax, at::kFloat);
  // A meta argument routes the call to the Meta kernel, which would otherwise return an empty tensor on A's device.
  CheckSameDevice(op, "B", B, A);
  CheckSameDevice(op, "absmax", absmax, A);
  for (const auto& [name, t] : {std::pair{"bias", &bias}, std::pair{"absmax_8bit", &absmax_8bit},
                                std::pair{"absmax_code", &absmax_code}, std::pair{"absmax_offset", &absmax_offset}}) {
    if (t->has_value()) CheckSameDevice(op, name, **t, A);
  }
  if (absmax_8bit.has_value()) {
    // Nested statistics: the per-block scales are 8-bit codes (blocksize 256) of absmax_code, plus the offset.
    TORCH_CHECK(absmax_code.has_value() && absmax_offset.has_value(), "bnb::", op, ": absmax_8bit needs ",
                "absmax_code and absmax_offset too");
    CheckDType(op, "absmax_8bit", *absmax_8bit, at::kByte);
    CheckNumel(op, "absmax_8bit", *absmax_8bit, NumBlocks(n, blocksize), "one per block of B");
    CheckNumel(op, "absmax", absmax, NumBlocks(NumBlocks(n, blocksize), 256), "one per 256 entries of absmax_8bit");
    CheckDType(op, "absmax_code", *absmax_code, at::kFloat);
    CheckNumel(op, "absmax_code", *absmax_code, 256, "one value per 8-bit code");
    TORCH_CHECK(absmax_offset->sym_numel() == 1, "bnb::", op, ": absmax_offset must be one value, got shape ",
                absmax_offset->sym_sizes());
  } else {
    TORCH_CHECK(!absmax_code.has_value() && !absmax_offset.has_value(), "bnb::", op, ": absmax_code and ",
                "absmax_offset describe nested statistics and go with absmax_8bit, which is missing");
    CheckNumel(op, "absmax", absmax, NumBlocks(n, blocksize), "one per block of B");
  }
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->sym_numel() == shapeB[0], "bnb::", op, ": bias must be a vector of ",
                shapeB[0], " values, got shape ", bias->sym_sizes());
    CheckDType(op, "bias", *bias, A.scalar_type());  // as F.linear: no silent conversion
  }
  if constexpr (kIsMeta) {
    return at::empty_symint(RowsTimesN(A, shapeB[0]), A.options());
  } else {
    at::Tensor scales = absmax;
    if (absmax_8bit.has_value()) {
      const at::Tensor codes8 = absmax_8bit->contiguous(), nested = absmax.contiguous();
      const at::Tensor code8 = absmax_code->contiguous();
      scales = at::empty({absmax_8bit->numel()}, absmax.options());
      const int64_t m = codes8.numel();
      if (A.is_cuda()) {
        const c10::DeviceGuard guard(A.device());
        ThrowIfLaunchFailed(op, bnb::jit::LaunchDequantizeBlockwise8(
                                    bnb::jit::KernelCache::Global(), A.get_device(), bnb::core::DType::kFloat32,
                                    codes8.data_ptr<uint8_t>(), code8.data_ptr<float>(), nested.data_ptr<float>(),
                                    scales.data_ptr(), m, 256, CurrentCudaStream(A), CudaThreadsPerBlock(op)));
      } else {
        auto cb = bnb::core::PrepareCodebookCached(code8.data_ptr<float>(), code8.numel());
        if (!cb.ok()) {
          ThrowIfError(op, absl::InvalidArgumentError(absl::StrCat("absmax_code: ", cb.status().message())));
        }
        bnb::core::DequantizeBlockwise8(bnb::core::DType::kFloat32, codes8.data_ptr<uint8_t>(),
                                        nested.data_ptr<float>(), **cb, {m, 256, 0, NumBlocks(m, 256).expect_int()},
                                        scales.data_ptr());
      }
      scales.add_(absmax_offset->to(scales.options()).reshape({}));
    }
    at::Tensor W = at::empty(shapeB, A.options());
    Dequantize4Into(op, B, scales, q, blocksize, dtype, W);
    return at::linear(A, W, bias);
  }
}

// The same kernels serve CPU and CUDA tensors (they branch on the device); Meta gets the shape-only instances.
template <bool kIsMeta>
void RegisterKernels(torch::Library& m) {
  m.impl("quantize_4bit", &Quantize4bit<kIsMeta>);
  m.impl("dequantize_4bit", &Dequantize4bit<kIsMeta>);
  m.impl("dequantize_4bit.out", &Dequantize4bitOut<kIsMeta>);
  m.impl("gemv_4bit", &Gemv4bit<kIsMeta>);
  m.impl("gemv_4bit.out", &Gemv4bitOut<kIsMeta>);
  m.impl("gemm_4bit", &Gemm4bit<kIsMeta>);
}

}  // namespace

TORCH_LIBRARY_IMPL(bnb, CPU, m) { RegisterKernels<false>(m); }
TORCH_LIBRARY_IMPL(bnb, CUDA, m) { RegisterKernels<false>(m); }
TORCH_LIBRARY_IMPL(bnb, Meta, m) { RegisterKernels<true>(m); }

}  // namespace bnb::ops
