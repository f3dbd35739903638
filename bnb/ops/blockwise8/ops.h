// Blockwise 8-bit ops (schemas.cc): their argument checks, shape rules and outputs, written once over a backend that
// supplies the kernels. A backend is a struct of static members:
//
//   struct MyBackend {
//     static constexpr bool kIsMeta = false;  // true: shapes only, and none of the functions below
//     // codes: uint8, A's numel; absmax: one float per block; both contiguous, on A's device.
//     static void Quantize(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize,
//                          core::DType dtype, at::Tensor& codes, at::Tensor& absmax);
//     // out: contiguous, A's shape and `out_type`, on A's device.
//     static void Dequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
//                            int64_t blocksize, core::DType out_type, at::Tensor& out);
//   };
//
// and its file registers Ops<MyBackend>::Register in a TORCH_LIBRARY_IMPL for its dispatch key (cpu.cc, cuda.cc,
// meta.cc here; an out-of-tree library the same way). Arguments reach the backend checked.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "bnb/core/blockwise8.h"
#include "bnb/ops/common/checks.h"
#include "bnb/ops/common/output_alloc.h"

namespace bnb::ops::blockwise8 {

// Checks shared by quantize_blockwise and quantize_blockwise_into; returns A's element type.
core::DType CheckQuantize(const char* op, const at::Tensor& A, const at::Tensor& code, int64_t blocksize);

// absmax: one float per block of A, on A's device.
void CheckAbsmax(const char* op, const at::Tensor& absmax, const at::Tensor& A, int64_t blocksize);

// Checks shared by both dequantize overloads; returns the output element type.
core::DType CheckDequantize(const char* op, const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                            int64_t blocksize, c10::ScalarType dtype);

template <class Backend>
struct Ops {
  static std::tuple<at::Tensor, at::Tensor> QuantizeBlockwise(const at::Tensor& A, const at::Tensor& code,
                                                              int64_t blocksize) {
    constexpr const char* op = "quantize_blockwise";
    const core::DType dtype = CheckQuantize(op, A, code, blocksize);
    if constexpr (Backend::kIsMeta) {
      return {at::empty_symint(A.sym_sizes(), A.options().dtype(at::kByte)),
              at::empty_symint({NumBlocks(A.sym_numel(), blocksize)}, A.options().dtype(at::kFloat))};
    } else {
      at::Tensor codes = EmptyOutput(A.sizes(), A.options().dtype(at::kByte));
      at::Tensor absmax = at::empty({core::NumBlocks(A.numel(), blocksize)}, A.options().dtype(at::kFloat));
      Backend::Quantize(op, A, code, blocksize, dtype, codes, absmax);
      return {codes, absmax};
    }
  }

  static void QuantizeBlockwiseInto(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, at::Tensor& out,
                                    at::Tensor& absmax) {
    constexpr const char* op = "quantize_blockwise_into";
    const core::DType dtype = CheckQuantize(op, A, code, blocksize);
    CheckOut(op, out, A.sym_sizes(), "A's shape", at::kByte, A);
    CheckAbsmax(op, absmax, A, blocksize);
    CheckWritable(op, "absmax", absmax);
    if constexpr (!Backend::kIsMeta) {
      CheckSeparateOuts(op, out, absmax);
      FillOut(out, {&A, &code, &absmax}, [&](at::Tensor& codes) {
        FillOut(absmax, {&A, &code, &codes},
                [&](at::Tensor& am) { Backend::Quantize(op, A, code, blocksize, dtype, codes, am); });
      });
    }
  }

  static at::Tensor DequantizeBlockwise(const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                                        int64_t blocksize, c10::ScalarType dtype) {
    constexpr const char* op = "dequantize_blockwise";
    const core::DType out_type = CheckDequantize(op, A, absmax, code, blocksize, dtype);
    if constexpr (Backend::kIsMeta) {
      return at::empty_symint(A.sym_sizes(), A.options().dtype(dtype));
    } else {
      at::Tensor out = EmptyOutput(A.sizes(), A.options().dtype(dtype));
      Backend::Dequantize(op, A, absmax, code, blocksize, out_type, out);
      return out;
    }
  }

  static void DequantizeBlockwiseOut(const at::Tensor& A, const at::Tensor& absmax, const at::Tensor& code,
                                     int64_t blocksize, c10::ScalarType dtype, at::Tensor& out) {
    constexpr const char* op = "dequantize_blockwise.out";
    const core::DType out_type = CheckDequantize(op, A, absmax, code, blocksize, dtype);
    CheckOut(op, out, A.sym_sizes(), "A's shape", dtype, A);
    if constexpr (!Backend::kIsMeta) {
      FillOut(out, {&A, &absmax, &code},
              [&](at::Tensor& dst) { Backend::Dequantize(op, A, absmax, code, blocksize, out_type, dst); });
    }
  }

  static void Register(torch::Library& m) {
    m.impl("quantize_blockwise", &QuantizeBlockwise);
    m.impl("quantize_blockwise_into", &QuantizeBlockwiseInto);
    m.impl("dequantize_blockwise", &DequantizeBlockwise);
    m.impl("dequantize_blockwise.out", &DequantizeBlockwiseOut);
  }
};

}  // namespace bnb::ops::blockwise8
