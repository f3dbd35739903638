// 4-bit ops (schemas.cc): their argument checks, shape rules and outputs, written once over a backend that supplies
// the kernels. A backend is a struct of static members:
//
//   struct MyBackend {
//     static constexpr bool kIsMeta = false;  // true: shapes only, and none of the functions below
//     // bytes: PackedSize4(A.numel()) uint8; absmax: one float per block; both contiguous, on A's device.
//     static void Quantize(const char* op, const at::Tensor& A, core::Quant4 q, int64_t blocksize,
//                          core::DType dtype, at::Tensor& bytes, at::Tensor& absmax);
//     // packed: the codes (PackedBytes: uint8, flat, contiguous); out: contiguous, `out_type`, on A's device.
//     static void Dequantize(const char* op, const at::Tensor& packed, const at::Tensor& absmax, core::Quant4 q,
//                            int64_t blocksize, core::DType out_type, at::Tensor& out);
//     // out = A (one row of K) times the [N, K] 4-bit matrix (packed) transposed; out contiguous, N values of A's
//     // dtype; code: the 16 values of the 4-bit type.
//     static void Gemv(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
//                      const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize, at::Tensor& out);
//     // Optional: the same with nested statistics (absmax holds the 8-bit codes' scales). Without it, Ops
//     // dequantizes them through the dispatcher first (NestedScales) and calls Gemv.
//     static void GemvNested(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
//                            const at::Tensor& absmax, const Nested& nested, const at::Tensor& code,
//                            int64_t blocksize, at::Tensor& out);
//     // Optional: gemm_4bit by a kernel of its own where it has one for these arguments (checked), or nullopt
//     // (then gemm_4bit dequantizes through the dispatcher, GemmByDequantize).
//     static c10::optional<at::Tensor> GemmDirect(const char* op, const at::Tensor& A, const at::Tensor& packed,
//                                                 int64_t N, int64_t K, const at::Tensor& absmax,
//                                                 const Nested& nested, core::Quant4 q, int64_t blocksize,
//                                                 const c10::optional<at::Tensor>& bias);
//     // Optional: pack_4bit and gemm_4bit_packed (the CPU layout, bnb/core/gemm4_packed.h) by kernels of their
//     // own; without them, Ops composes them from ATen ops (PackByTensorOps, GemmPackedByTensorOps). GemmPacked
//     // fills out (contiguous, A's dtype, A's shape with its last dimension N) and returns true, or returns false,
//     // writing nothing, where it has no kernel for these arguments (then Ops composes the product).
//     static void Pack(const char* op, const at::Tensor& packed, int64_t N, int64_t K, const at::Tensor& absmax,
//                      int64_t blocksize, at::Tensor& codes, at::Tensor& scales);
//     static bool GemmPacked(const char* op, const at::Tensor& A, const at::Tensor& codes, const at::Tensor& scales,
//                            int64_t N, int64_t K, int64_t blocksize, const at::Tensor& code,
//                            const c10::optional<at::Tensor>& bias, bool int8_activations, at::Tensor& out);
//     // Optional too: unpack_4bit (out: N * K / 2 uint8, contiguous); without it, UnpackByTensorOps.
//     static void Unpack(const char* op, const at::Tensor& codes, int64_t N, int64_t K, at::Tensor& out);
//   };
//
// and its file registers Ops<MyBackend>::Register in a TORCH_LIBRARY_IMPL for its dispatch key. gemm_4bit needs no
// kernel of its own: it dequantizes through the dispatcher (dequantize_blockwise for nested statistics, then
// dequantize_4bit) and multiplies with at::linear, so whichever backend serves those serves it.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/gemm4_packed.h"
#include "bnb/core/gemv4.h"
#include "bnb/ops/common/checks.h"
#include "bnb/ops/common/output_alloc.h"

namespace bnb::ops::blockwise4 {

core::Quant4 ParseQuantType(const char* op, c10::string_view quant_type);

// Packed codes of `storage` in rows of one: the quantize output's shape (meta: symbolic). arg names the storage's
// source in errors.
c10::SymInt PackedElements(const char* op, const c10::SymInt& n, c10::ScalarType storage,
                           const char* arg = "quant_storage");

// Checks of quantize_4bit and quantize_4bit_into: A's dtype (returned) and that it is not empty, blocksize,
// quant_type (parsed). quantize_4bit_into's out (quantize_4bit's packed shape, with its own dtype as quant_storage)
// and absmax (one float32 per block, writable).
std::pair<core::DType, core::Quant4> CheckQuantize(const char* op, const at::Tensor& A, int64_t blocksize,
                                                   c10::string_view quant_type);
void CheckQuantizeInto(const char* op, const at::Tensor& A, int64_t blocksize, const at::Tensor& out,
                       const at::Tensor& absmax);

// The bytes of a packed tensor of any storage dtype, flat and contiguous.
inline at::Tensor PackedBytes(const at::Tensor& t) { return t.contiguous().view(at::kByte).reshape({-1}); }

// Checks of both dequantize_4bit overloads; returns the output element type.
core::DType CheckDequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize,
                            c10::string_view quant_type, at::IntArrayRef shape, c10::ScalarType dtype);

// Nested statistics of gemv_4bit and gemm_4bit: the 8-bit codes of the per-block scales (absmax_8bit, blocksize
// 256, absmax holding their scales), their codebook and an offset added to every scale. All or none (checked).
struct Nested {
  const c10::optional<at::Tensor>& absmax_8bit;
  const c10::optional<at::Tensor>& absmax_code;
  const c10::optional<at::Tensor>& absmax_offset;

  bool present() const { return absmax_8bit.has_value(); }
};

// Checks of absmax and the nested statistics of a 4-bit tensor of n elements (A: the op's device).
void CheckScales(const char* op, const c10::SymInt& n, int64_t blocksize, const at::Tensor& absmax,
                 const Nested& nested, const at::Tensor& A);

// The float32 scale of each block: absmax itself, or the nested statistics dequantized through the dispatcher
// (dequantize_blockwise, then + offset), on any backend.
at::Tensor NestedScales(const char* op, const at::Tensor& absmax, const Nested& nested);

// Checks of both gemv_4bit overloads; returns the output shape.
std::vector<c10::SymInt> CheckGemv(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                                   const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize,
                                   const Nested& nested);

// Checks of gemm_4bit; returns the output shape.
std::vector<c10::SymInt> CheckGemm(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                                   const at::Tensor& absmax, int64_t blocksize, c10::string_view quant_type,
                                   const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& absmax_8bit,
                                   const c10::optional<at::Tensor>& absmax_code,
                                   const c10::optional<at::Tensor>& absmax_offset);

// gemm_4bit's product for checked arguments, on any backend (see above).
at::Tensor GemmByDequantize(const char* op, const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                            const at::Tensor& absmax, int64_t blocksize, c10::string_view quant_type,
                            const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& absmax_8bit,
                            const c10::optional<at::Tensor>& absmax_code,
                            const c10::optional<at::Tensor>& absmax_offset);

// Checks of pack_4bit; of unpack_4bit; of gemm_4bit_packed (returns the output shape).
void CheckPack(const char* op, const at::Tensor& B, at::IntArrayRef shapeB, const at::Tensor& absmax,
               int64_t blocksize);
void CheckUnpack(const char* op, const at::Tensor& codes, at::IntArrayRef shapeB);
std::vector<c10::SymInt> CheckGemmPacked(const char* op, const at::Tensor& A, const at::Tensor& codes,
                                         const at::Tensor& scales, at::IntArrayRef shapeB, int64_t blocksize,
                                         const at::Tensor& code, const c10::optional<at::Tensor>& bias);

// gemm_4bit_packed's int8 code values (core::Int8CodeValues) from code (any device: its 16 values are read on the
// host); an error naming a value outside [-1, 1].
std::array<int8_t, 16> Int8CodeValuesOf(const char* op, const at::Tensor& code);

// The packed layout by ATen ops on any device (packed.cc), for backends without kernels of their own: the layout as
// a permutation of the codes (pack) and its inverse (unpack), and the weight unpermuted, dequantized in A's dtype
// and multiplied (at::linear), or with int8_activations, the int8 product by its definition (bnb/core/gemm4_packed.h).
std::tuple<at::Tensor, at::Tensor> PackByTensorOps(const at::Tensor& packed, int64_t N, int64_t K,
                                                   const at::Tensor& absmax, int64_t blocksize);
at::Tensor UnpackByTensorOps(const at::Tensor& codes, int64_t N, int64_t K);
at::Tensor GemmPackedByTensorOps(const char* op, const at::Tensor& A, const at::Tensor& codes,
                                 const at::Tensor& scales, int64_t N, int64_t K, int64_t blocksize,
                                 const at::Tensor& code, const c10::optional<at::Tensor>& bias,
                                 bool int8_activations);

template <class Backend, class = void>
struct HasPacked : std::false_type {};
template <class Backend>
struct HasPacked<Backend, std::void_t<decltype(&Backend::Pack), decltype(&Backend::GemmPacked)>> : std::true_type {};

template <class Backend, class = void>
struct HasUnpack : std::false_type {};
template <class Backend>
struct HasUnpack<Backend, std::void_t<decltype(&Backend::Unpack)>> : std::true_type {};

template <class Backend, class = void>
struct ReadsNested : std::false_type {};
template <class Backend>
struct ReadsNested<Backend, std::void_t<decltype(&Backend::GemvNested)>> : std::true_type {};

template <class Backend, class = void>
struct HasGemmDirect : std::false_type {};
template <class Backend>
struct HasGemmDirect<Backend, std::void_t<decltype(&Backend::GemmDirect)>> : std::true_type {};

template <class Backend>
struct Ops {
  static void RunGemv(const char* op, const at::Tensor& A, const at::Tensor& packed, int64_t N, int64_t K,
                      const at::Tensor& absmax, const Nested& nested, const at::Tensor& code, int64_t blocksize,
                      at::Tensor& out) {
    if constexpr (ReadsNested<Backend>::value) {
      if (nested.present()) return Backend::GemvNested(op, A, packed, N, K, absmax, nested, code, blocksize, out);
    }
    Backend::Gemv(op, A, packed, N, K, NestedScales(op, absmax, nested), code, blocksize, out);
  }

  static std::tuple<at::Tensor, at::Tensor> Quantize4bit(const at::Tensor& A, int64_t blocksize,
                                                         c10::string_view quant_type, c10::ScalarType quant_storage) {
    constexpr const char* op = "quantize_4bit";
    const auto [dtype, q] = CheckQuantize(op, A, blocksize, quant_type);
    const c10::SymInt packed_rows = PackedElements(op, A.sym_numel(), quant_storage);
    if constexpr (Backend::kIsMeta) {
      return {at::empty_symint({packed_rows, 1}, A.options().dtype(quant_storage)),
              at::empty_symint({NumBlocks(A.sym_numel(), blocksize)}, A.options().dtype(at::kFloat))};
    } else {
      const int64_t n = A.numel();
      at::Tensor bytes = EmptyOutput({core::PackedSize4(n)}, A.options().dtype(at::kByte));
      at::Tensor absmax = at::empty({core::NumBlocks(n, blocksize)}, A.options().dtype(at::kFloat));
      Backend::Quantize(op, A, q, blocksize, dtype, bytes, absmax);
      return {bytes.view(quant_storage).reshape({-1, 1}), absmax};
    }
  }

  static void Quantize4bitInto(const at::Tensor& A, int64_t blocksize, c10::string_view quant_type, at::Tensor& out,
                               at::Tensor& absmax) {
    constexpr const char* op = "quantize_4bit_into";
    const std::pair<core::DType, core::Quant4> checked = CheckQuantize(op, A, blocksize, quant_type);
    CheckQuantizeInto(op, A, blocksize, out, absmax);
    if constexpr (!Backend::kIsMeta) {
      CheckSeparateOuts(op, out, absmax);
      FillOut(out, {&A, &absmax}, [&](at::Tensor& packed) {
        FillOut(absmax, {&A, &packed}, [&](at::Tensor& am) {
          at::Tensor bytes = packed.view(at::kByte).view({-1});
          Backend::Quantize(op, A, checked.second, blocksize, checked.first, bytes, am);
        });
      });
    }
  }

  static at::Tensor Dequantize4bit(const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize,
                                   c10::string_view quant_type, at::IntArrayRef shape, c10::ScalarType dtype) {
    constexpr const char* op = "dequantize_4bit";
    const core::DType out_type = CheckDequantize(op, A, absmax, blocksize, quant_type, shape, dtype);
    if constexpr (Backend::kIsMeta) {
      return at::empty(shape, A.options().dtype(dtype));
    } else {
      at::Tensor out = EmptyOutput(shape, A.options().dtype(dtype));
      Backend::Dequantize(op, PackedBytes(A), absmax, ParseQuantType(op, quant_type), blocksize, out_type, out);
      return out;
    }
  }

  static void Dequantize4bitOut(const at::Tensor& A, const at::Tensor& absmax, int64_t blocksize,
                                c10::string_view quant_type, at::IntArrayRef shape, c10::ScalarType dtype,
                                at::Tensor& out) {
    constexpr const char* op = "dequantize_4bit.out";
    const core::DType out_type = CheckDequantize(op, A, absmax, blocksize, quant_type, shape, dtype);
    CheckOut(op, out, c10::fromIntArrayRefSlow(shape), "shape", dtype, A);
    if constexpr (!Backend::kIsMeta) {
      const core::Quant4 q = ParseQuantType(op, quant_type);
      FillOut(out, {&A, &absmax}, [&](at::Tensor& dst) {
        Backend::Dequantize(op, PackedBytes(A), absmax, q, blocksize, out_type, dst);
      });
    }
  }

  static at::Tensor Gemv4bit(const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                             const at::Tensor& absmax, const at::Tensor& code, int64_t blocksize,
                             const c10::optional<at::Tensor>& absmax_8bit,
                             const c10::optional<at::Tensor>& absmax_code,
                             const c10::optional<at::Tensor>& absmax_offset) {
    constexpr const char* op = "gemv_4bit";
    const Nested nested{absmax_8bit, absmax_code, absmax_offset};
    at::Tensor out = EmptyOutputSymint(CheckGemv(op, A, B, shapeB, absmax, code, blocksize, nested), A.options());
    if constexpr (!Backend::kIsMeta) {
      RunGemv(op, A, PackedBytes(B), shapeB[0], shapeB[1], absmax, nested, code, blocksize, out);
    }
    return out;
  }

  static void Gemv4bitOut(const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB, const at::Tensor& absmax,
                          const at::Tensor& code, int64_t blocksize, const c10::optional<at::Tensor>& absmax_8bit,
                          const c10::optional<at::Tensor>& absmax_code,
                          const c10::optional<at::Tensor>& absmax_offset, at::Tensor& out) {
    constexpr const char* op = "gemv_4bit.out";
    const Nested nested{absmax_8bit, absmax_code, absmax_offset};
    const std::vector<c10::SymInt> shape = CheckGemv(op, A, B, shapeB, absmax, code, blocksize, nested);
    CheckOut(op, out, shape, "shape", A.scalar_type(), A);
    if constexpr (!Backend::kIsMeta) {
      std::vector<const at::Tensor*> inputs = {&A, &B, &absmax, &code};
      for (const auto* t : {&absmax_8bit, &absmax_code, &absmax_offset}) {
        if (t->has_value()) inputs.push_back(&**t);
      }
      FillOut(out, inputs, [&](at::Tensor& dst) {
        RunGemv(op, A, PackedBytes(B), shapeB[0], shapeB[1], absmax, nested, code, blocksize, dst);
      });
    }
  }

  static at::Tensor Gemm4bit(const at::Tensor& A, const at::Tensor& B, at::IntArrayRef shapeB,
                             const at::Tensor& absmax, int64_t blocksize, c10::string_view quant_type,
                             const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& absmax_8bit,
                             const c10::optional<at::Tensor>& absmax_code,
                             const c10::optional<at::Tensor>& absmax_offset) {
    constexpr const char* op = "gemm_4bit";
    const std::vector<c10::SymInt> shape = CheckGemm(op, A, B, shapeB, absmax, blocksize, quant_type, bias,
                                                     absmax_8bit, absmax_code, absmax_offset);
    if constexpr (Backend::kIsMeta) {
      return at::empty_symint(shape, A.options());
    } else {
      if constexpr (HasGemmDirect<Backend>::value) {
        c10::optional<at::Tensor> direct =
            Backend::GemmDirect(op, A, PackedBytes(B), shapeB[0], shapeB[1], absmax,
                                Nested{absmax_8bit, absmax_code, absmax_offset}, ParseQuantType(op, quant_type),
                                blocksize, bias);
        if (direct.has_value()) return *direct;
      }
      return GemmByDequantize(op, A, B, shapeB, absmax, blocksize, quant_type, bias, absmax_8bit, absmax_code,
                              absmax_offset);
    }
  }

  static std::tuple<at::Tensor, at::Tensor> Pack4bit(const at::Tensor& B, at::IntArrayRef shapeB,
                                                     const at::Tensor& absmax, int64_t blocksize) {
    constexpr const char* op = "pack_4bit";
    CheckPack(op, B, shapeB, absmax, blocksize);
    const int64_t N = shapeB[0], K = shapeB[1];
    if constexpr (Backend::kIsMeta) {
      return {at::empty({core::Packed4CodeBytes(N, K)}, B.options().dtype(at::kByte)),
              at::empty({core::Packed4ScaleCount(N, K, blocksize)}, B.options().dtype(at::kFloat))};
    } else if constexpr (HasPacked<Backend>::value) {
      at::Tensor codes = EmptyOutput({core::Packed4CodeBytes(N, K)}, B.options().dtype(at::kByte));
      at::Tensor scales = EmptyOutput({core::Packed4ScaleCount(N, K, blocksize)}, B.options().dtype(at::kFloat));
      Backend::Pack(op, PackedBytes(B), N, K, absmax, blocksize, codes, scales);
      return {codes, scales};
    } else {
      return PackByTensorOps(PackedBytes(B), N, K, absmax, blocksize);
    }
  }

  static at::Tensor Unpack4bit(const at::Tensor& codes, at::IntArrayRef shapeB) {
    constexpr const char* op = "unpack_4bit";
    CheckUnpack(op, codes, shapeB);
    const int64_t N = shapeB[0], K = shapeB[1];
    if constexpr (Backend::kIsMeta) {
      return at::empty({N * K / 2}, codes.options());
    } else if constexpr (HasUnpack<Backend>::value) {
      at::Tensor out = at::empty({N * K / 2}, codes.options());
      Backend::Unpack(op, codes.contiguous(), N, K, out);
      return out;
    } else {
      return UnpackByTensorOps(codes, N, K);
    }
  }

  static at::Tensor GemmPacked4bit(const at::Tensor& A, const at::Tensor& codes, const at::Tensor& scales,
                                   at::IntArrayRef shapeB, int64_t blocksize, const at::Tensor& code,
                                   const c10::optional<at::Tensor>& bias, bool int8_activations) {
    constexpr const char* op = "gemm_4bit_packed";
    const std::vector<c10::SymInt> shape = CheckGemmPacked(op, A, codes, scales, shapeB, blocksize, code, bias);
    if constexpr (Backend::kIsMeta) {
      return at::empty_symint(shape, A.options());
    } else {
      if constexpr (HasPacked<Backend>::value) {
        at::Tensor out = EmptyOutputSymint(shape, A.options());
        if (Backend::GemmPacked(op, A, codes, scales, shapeB[0], shapeB[1], blocksize, code, bias, int8_activations,
                                out)) {
          return out;
        }
      }
      return GemmPackedByTensorOps(op, A, codes, scales, shapeB[0], shapeB[1], blocksize, code, bias,
                                   int8_activations);
    }
  }

  static void Register(torch::Library& m) {
    m.impl("quantize_4bit", &Quantize4bit);
    m.impl("quantize_4bit_into", &Quantize4bitInto);
    m.impl("dequantize_4bit", &Dequantize4bit);
    m.impl("dequantize_4bit.out", &Dequantize4bitOut);
    m.impl("gemv_4bit", &Gemv4bit);
    m.impl("gemv_4bit.out", &Gemv4bitOut);
    m.impl("gemm_4bit", &Gemm4bit);
    m.impl("pack_4bit", &Pack4bit);
    m.impl("unpack_4bit", &Unpack4bit);
    m.impl("gemm_4bit_packed", &GemmPacked4bit);
  }
};

}  // namespace bnb::ops::blockwise4
