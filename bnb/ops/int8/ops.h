// LLM.int8() ops (schemas.cc): their argument checks, shape rules and outputs, written once over a backend that
// supplies the kernels (see bnb/ops/blockwise8/ops.h for the pattern). A backend is a struct of static members:
//
//   struct MyBackend {
//     static constexpr bool kIsMeta = false;  // true: shapes only, and none of the functions below
//     // codes, stats: [rows, K] int8 and [rows] float32, contiguous; returns the outlier columns (threshold > 0:
//     // ascending int64, maybe empty) or nullopt (threshold 0).
//     static c10::optional<at::Tensor> QuantizeRows(const char* op, const at::Tensor& A, double threshold,
//                                                   at::Tensor& codes, at::Tensor& stats);
//     // col_codes, col_stats: [rows, K] int8 and [K] float32, contiguous (QuantizeRows does the rest).
//     static void QuantizeColumns(const char* op, const at::Tensor& A, double threshold, at::Tensor& col_codes,
//                                 at::Tensor& col_stats);
//     // out: [rows, K] float32, contiguous.
//     static void DequantizeRows(const char* op, const at::Tensor& A, const at::Tensor& stats, at::Tensor& out);
//     // out: [rows, N] int32, contiguous; A: [rows, K] int8, B: [N, K] int8, as given.
//     static void Matmul(const char* op, const at::Tensor& A, const at::Tensor& B, at::Tensor& out);
//     // out: [rows, N] of its dtype, contiguous; A: [rows, N] int32.
//     static void DequantizeProduct(const char* op, const at::Tensor& A, const at::Tensor& row_stats,
//                                   const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias,
//                                   at::Tensor& out);
//   };
//
// Two more kernels are optional; a backend that has them is faster, one without gets these compositions:
//
//     // out ([rows, N] of its dtype, contiguous) = Matmul's product dequantized as DequantizeProduct does, in one
//     // pass; returns false to leave it to Matmul and DequantizeProduct (out untouched).
//     static bool ScaledMatmul(const char* op, const at::Tensor& A, const at::Tensor& B, const at::Tensor& row_stats,
//                              const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias, at::Tensor& out);
//     // [N, len(cols)] of dtype: the columns `cols` (checked) of codes [N, K], dequantized by DequantizeRows' rule
//     // and rounded to dtype.
//     static at::Tensor DequantizeColumns(const char* op, const at::Tensor& codes, const at::Tensor& stats,
//                                         const at::Tensor& cols, c10::ScalarType dtype);
//
// int8_scaled_mm and int8_mixed_scaled_mm are compositions of these (and ATen ops), the same on every backend. The
// outlier columns' count depends on the data, which a C++ Meta kernel cannot express: int8_vectorwise_quant and
// int8_double_quant get their Meta / fake kernels from bnb/python/bnb/reference/int8.py.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>
#include <vector>

#include "bnb/ops/common/checks.h"
#include "bnb/ops/common/output_alloc.h"

namespace bnb::ops::int8 {

inline constexpr int64_t kMaxK = 131071;  // the longest int8 dot product int32 holds: 128 * 128 * 131071 < 2^31

// A's rows (its leading dimensions, flattened) and K (its last), checked: float, at least 1-D, not empty.
std::pair<int64_t, int64_t> CheckQuantizeInput(const char* op, const at::Tensor& A, double threshold);

// int8_linear_matmul's checks; returns the output shape.
std::vector<c10::SymInt> CheckMatmul(const char* op, const at::Tensor& A, const at::Tensor& B);

// The stats, output dtype and bias that dequantize a [rows, n] int32 product, on like's device; returns the dtype.
c10::ScalarType CheckDequantizeProduct(const char* op, const at::Tensor& like, const c10::SymInt& rows,
                                       const c10::SymInt& n, const at::Tensor& row_stats, const at::Tensor& col_stats,
                                       c10::optional<c10::ScalarType> dtype, const c10::optional<at::Tensor>& bias);

// int8_vectorwise_dequant's checks: A int8, at least 1-D; stats one float32 per row.
void CheckDequantizeRows(const char* op, const at::Tensor& A, const at::Tensor& stats);

// The outlier columns of int8_mixed_scaled_mm, checked (int64, a vector, indices in [0, K): this reads them, unless
// they are the ones RecordQuantizedColumns saw last on this thread, unchanged since); an empty vector for none.
at::Tensor CheckedOutlierColumns(const char* op, const c10::optional<at::Tensor>& cols, const at::Tensor& A);

// Notes the outlier columns a quantize op returns, all in [0, K) (see CheckedOutlierColumns).
void RecordQuantizedColumns(const at::Tensor& cols, int64_t K);

// A tensor's rows, the product of its leading dimensions (its last may be 0), and the tensor as [rows, last].
inline c10::SymInt SymRows(const at::Tensor& t) {
  c10::SymInt rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.sym_size(d);
  return rows;
}
inline int64_t NumRows(const at::Tensor& t) { return SymRows(t).guard_int(__FILE__, __LINE__); }
inline at::Tensor Rows(const at::Tensor& t) { return t.reshape_symint({SymRows(t), t.sym_size(-1)}); }

// Whether a backend has the optional kernels (see above).
template <class Backend, class = void>
struct HasScaledMatmul : std::false_type {};
template <class Backend>
struct HasScaledMatmul<Backend, std::void_t<decltype(&Backend::ScaledMatmul)>> : std::true_type {};
template <class Backend, class = void>
struct HasDequantizeColumns : std::false_type {};
template <class Backend>
struct HasDequantizeColumns<Backend, std::void_t<decltype(&Backend::DequantizeColumns)>> : std::true_type {};

template <class Backend>
struct Ops {
  static std::tuple<at::Tensor, at::Tensor, c10::optional<at::Tensor>> VectorwiseQuant(const at::Tensor& A,
                                                                                      double threshold) {
    constexpr const char* op = "int8_vectorwise_quant";
    const auto [rows, K] = CheckQuantizeInput(op, A, threshold);
    at::Tensor codes = EmptyOutput(A.sizes(), A.options().dtype(at::kChar));
    at::Tensor stats = at::empty({rows}, A.options().dtype(at::kFloat));
    c10::optional<at::Tensor> cols = Backend::QuantizeRows(op, A, threshold, codes, stats);
    if (cols.has_value()) RecordQuantizedColumns(*cols, K);
    return {codes, stats, cols};
  }

  static at::Tensor VectorwiseDequant(const at::Tensor& A, const at::Tensor& stats) {
    constexpr const char* op = "int8_vectorwise_dequant";
    CheckDequantizeRows(op, A, stats);
    at::Tensor out = EmptyOutputSymint(A.sym_sizes(), A.options().dtype(at::kFloat));
    if constexpr (!Backend::kIsMeta) Backend::DequantizeRows(op, A, stats, out);
    return out;
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::optional<at::Tensor>> DoubleQuant(
      const at::Tensor& A, double threshold) {
    constexpr const char* op = "int8_double_quant";
    const auto [rows, K] = CheckQuantizeInput(op, A, threshold);
    at::Tensor row_codes = EmptyOutput(A.sizes(), A.options().dtype(at::kChar));
    at::Tensor col_codes = EmptyOutput(A.sizes(), A.options().dtype(at::kChar));
    at::Tensor row_stats = at::empty({rows}, A.options().dtype(at::kFloat));
    at::Tensor col_stats = at::empty({K}, A.options().dtype(at::kFloat));
    c10::optional<at::Tensor> cols = Backend::QuantizeRows(op, A, threshold, row_codes, row_stats);
    Backend::QuantizeColumns(op, A, threshold, col_codes, col_stats);
    if (cols.has_value()) RecordQuantizedColumns(*cols, K);
    return {row_codes, col_codes, row_stats, col_stats, cols};
  }

  static at::Tensor LinearMatmul(const at::Tensor& A, const at::Tensor& B) {
    constexpr const char* op = "int8_linear_matmul";
    at::Tensor out = EmptyOutputSymint(CheckMatmul(op, A, B), A.options().dtype(at::kInt));
    if constexpr (!Backend::kIsMeta) {
      at::Tensor rows = Rows(out);
      Backend::Matmul(op, Rows(A), B, rows);
    }
    return out;
  }

  static void LinearMatmulOut(const at::Tensor& A, const at::Tensor& B, at::Tensor& out) {
    constexpr const char* op = "int8_linear_matmul.out";
    const std::vector<c10::SymInt> shape = CheckMatmul(op, A, B);
    CheckOut(op, out, shape, "shape", at::kInt, A);
    if constexpr (!Backend::kIsMeta) {
      FillOut(out, {&A, &B}, [&](at::Tensor& dst) {
        at::Tensor rows = Rows(dst);
        Backend::Matmul(op, Rows(A), B, rows);
      });
    }
  }

  static at::Tensor MmDequant(const at::Tensor& A, const at::Tensor& row_stats, const at::Tensor& col_stats,
                              c10::optional<c10::ScalarType> dtype, const c10::optional<at::Tensor>& bias) {
    constexpr const char* op = "int8_mm_dequant";
    CheckDType(op, "A", A, at::kInt);
    TORCH_CHECK(A.dim() >= 1, "bnb::", op, ": A must have at least one dimension, got a scalar");
    const c10::ScalarType out_type =
        CheckDequantizeProduct(op, A, SymRows(A), A.sym_size(-1), row_stats, col_stats, dtype, bias);
    at::Tensor out = EmptyOutputSymint(A.sym_sizes(), A.options().dtype(out_type));
    if constexpr (!Backend::kIsMeta) {
      at::Tensor rows = Rows(out);
      Backend::DequantizeProduct(op, Rows(A), row_stats, col_stats, bias, rows);
    }
    return out;
  }

  static at::Tensor ScaledMm(const at::Tensor& A, const at::Tensor& B, const at::Tensor& row_stats,
                             const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias,
                             c10::optional<c10::ScalarType> dtype) {
    constexpr const char* op = "int8_scaled_mm";
    const std::vector<c10::SymInt> shape = CheckMatmul(op, A, B);
    const c10::ScalarType out_type =
        CheckDequantizeProduct(op, A, SymRows(A), B.sym_size(0), row_stats, col_stats, dtype, bias);
    at::Tensor out = EmptyOutputSymint(shape, A.options().dtype(out_type));
    if constexpr (!Backend::kIsMeta) ScaledProduct(op, A, B, row_stats, col_stats, bias, out);
    return out;
  }

  static std::tuple<at::Tensor, c10::optional<at::Tensor>> MixedScaledMm(
      const at::Tensor& A, const at::Tensor& CA, const at::Tensor& CB, const at::Tensor& SCA, const at::Tensor& SCB,
      const c10::optional<at::Tensor>& outlier_cols, const c10::optional<at::Tensor>& bias) {
    constexpr const char* op = "int8_mixed_scaled_mm";
    FloatDType(op, "A", A.scalar_type());
    TORCH_CHECK(A.sym_sizes() == CA.sym_sizes(), "bnb::", op, ": CA must have A's shape ", A.sym_sizes(), ", got ",
                CA.sym_sizes());
    const std::vector<c10::SymInt> shape = CheckMatmul(op, CA, CB);
    CheckDequantizeProduct(op, A, SymRows(A), CB.sym_size(0), SCA, SCB, A.scalar_type(), bias);
    CheckSameDevice(op, "CA", CA, A);
    if (outlier_cols.has_value()) CheckSameDevice(op, "outlier_cols", *outlier_cols, A);
    if constexpr (Backend::kIsMeta) {
      const c10::SymInt n = outlier_cols.has_value() ? outlier_cols->sym_size(0) : c10::SymInt(0);
      return {at::empty_symint(shape, A.options()), at::empty_symint({SymRows(A), n}, A.options())};
    } else {
      const at::Tensor cols = CheckedOutlierColumns(op, outlier_cols, A);
      at::Tensor out = EmptyOutputSymint(shape, A.options());
      ScaledProduct(op, CA, CB, SCA, SCB, bias, out);
      // The outlier columns in A's precision: A's and the weight's (dequantized) columns, added by one addmm.
      const at::Tensor subA = Rows(A).index_select(1, cols);
      at::Tensor subB;
      if constexpr (HasDequantizeColumns<Backend>::value) {
        subB = Backend::DequantizeColumns(op, CB, SCB, cols, A.scalar_type());
      } else {
        const at::Tensor sub_codes = CB.index_select(1, cols).contiguous();
        subB = at::empty(sub_codes.sizes(), sub_codes.options().dtype(at::kFloat));
        Backend::DequantizeRows(op, sub_codes, SCB, subB);
        subB = subB.to(A.scalar_type());
      }
      Rows(out).addmm_(subA, subB.t());
      return {out, subA};
    }
  }

  static void Register(torch::Library& m) {
    if constexpr (!Backend::kIsMeta) {  // their Meta kernels are Python fakes (see above)
      m.impl("int8_vectorwise_quant", &VectorwiseQuant);
      m.impl("int8_double_quant", &DoubleQuant);
    }
    m.impl("int8_vectorwise_dequant", &VectorwiseDequant);
    m.impl("int8_linear_matmul", &LinearMatmul);
    m.impl("int8_linear_matmul.out", &LinearMatmulOut);
    m.impl("int8_mm_dequant", &MmDequant);
    m.impl("int8_scaled_mm", &ScaledMm);
    m.impl("int8_mixed_scaled_mm", &MixedScaledMm);
  }

 private:
  // out = the dequantized product of the int8 A and B (checked), in out's dtype.
  static void ScaledProduct(const char* op, const at::Tensor& A, const at::Tensor& B, const at::Tensor& row_stats,
                            const at::Tensor& col_stats, const c10::optional<at::Tensor>& bias, at::Tensor& out) {
    if constexpr (HasScaledMatmul<Backend>::value) {
      at::Tensor rows = Rows(out);
      if (Backend::ScaledMatmul(op, Rows(A), B, row_stats, col_stats, bias, rows)) return;
    }
    at::Tensor product = at::empty({Rows(A).size(0), B.size(0)}, A.options().dtype(at::kInt));
    Backend::Matmul(op, Rows(A), B, product);
    at::Tensor rows = Rows(out);
    Backend::DequantizeProduct(op, product, row_stats, col_stats, bias, rows);
  }
};

}  // namespace bnb::ops::int8
