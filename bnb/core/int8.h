// LLM.int8() passes over raw row-major [rows, K] buffers: row- and column-wise int8 quantization with outlier
// columns, dequantization, and the epilogue of an int8 matrix product. The rules are those of
// bnb/python/bnb/reference/int8.py, bit for bit:
//   - outliers: |x| >= threshold (x widened to float32, threshold rounded to float32); threshold 0 finds none;
//   - a row's (column's) absmax leaves its outliers out; NaN anywhere in it makes it NaN;
//   - row codes: round-half-even(x * (127 / absmax)), 127 / absmax rounded once; column codes:
//     round-half-even((x * 127) / absmax) with outliers as 0; both clamped to [-127, 127], and 0 where the absmax
//     is 0 or not finite;
//   - dequantize: (code * stats) * (1/127); epilogue: (int32 * (row_stat * col_stat)) * (1/127^2) + bias, float32,
//     rounded once to the output type.
// Each function takes a range of rows, so callers may split rows across threads. Vectorized (Highway) and scalar
// versions agree bit for bit.
#pragma once

#include <cstdint>

#include "bnb/core/dtype.h"

namespace bnb::core {

inline constexpr float kInv127 = 7.874015718698502e-3f;
inline constexpr float kInv127Squared = 6.200012285262346e-05f;  // 1 / 16129, rounded

// out_flags[k] |= 1 for each column k of rows [r0, r1) of x (dtype, [*, K]) holding an outlier.
void Int8OutlierColumns(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                        uint8_t* out_flags);

// Rows [r0, r1): row_stats[r] = the row's absmax, codes[r, :] its codes (threshold 0: no outliers). Codes of
// outlier columns are not zeroed here (the caller knows them only once every row was scanned).
void Int8QuantizeRows(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                      int8_t* codes, float* row_stats);

// col_absmax[k] = max(col_absmax[k], |x[r, k]|) over rows [r0, r1), outliers counting as 0, NaN sticking (the bits
// of a float as int32 order magnitudes: the caller starts from 0s and may merge threads' partial maxima with
// Int8MergeColumnAbsmax).
void Int8ColumnAbsmax(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                      float* col_absmax);
void Int8MergeColumnAbsmax(const float* partial, int64_t K, float* col_absmax);

// Rows [r0, r1) of the column codes, given every column's absmax.
void Int8QuantizeColumns(DType dtype, const void* x, int64_t K, float threshold, const float* col_absmax, int64_t r0,
                         int64_t r1, int8_t* codes);

// Rows [r0, r1): out[r, k] = (codes[r, k] * stats[r]) * kInv127, float32.
void Int8DequantizeRows(const int8_t* codes, const float* stats, int64_t K, int64_t r0, int64_t r1, float* out);

// Rows [r0, r1) of out (dtype, [*, n_cols]): out[r, j] = (codes[r, cols[j]] * stats[r]) * kInv127 in float32,
// rounded once to dtype (Int8DequantizeRows of those columns, then the conversion). codes: [*, K]; each cols[j] in
// [0, K). One version: a gather of a few columns per row, in scalar code.
void Int8DequantizeColumns(const int8_t* codes, int64_t K, const float* stats, const int64_t* cols, int64_t n_cols,
                           int64_t r0, int64_t r1, DType dtype, void* out);

// Rows [r0, r1) of out (dtype, [*, N]) = (float(A[r, n]) * (row_stats[r] * col_stats[n])) * kInv127Squared
// (+ bias[n] widened to float32, when bias is not null), rounded once to dtype.
void Int8DequantizeProduct(const int32_t* A, const float* row_stats, const float* col_stats, DType bias_dtype,
                           const void* bias, int64_t N, int64_t r0, int64_t r1, DType dtype, void* out);

// The scalar definitions the vectorized ones are tested against.
namespace int8_scalar {
void OutlierColumns(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1,
                    uint8_t* out_flags);
void QuantizeRows(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, int8_t* codes,
                  float* row_stats);
void ColumnAbsmax(DType dtype, const void* x, int64_t K, float threshold, int64_t r0, int64_t r1, float* col_absmax);
void QuantizeColumns(DType dtype, const void* x, int64_t K, float threshold, const float* col_absmax, int64_t r0,
                     int64_t r1, int8_t* codes);
void DequantizeRows(const int8_t* codes, const float* stats, int64_t K, int64_t r0, int64_t r1, float* out);
void DequantizeProduct(const int32_t* A, const float* row_stats, const float* col_stats, DType bias_dtype,
                       const void* bias, int64_t N, int64_t r0, int64_t r1, DType dtype, void* out);
}  // namespace int8_scalar

}  // namespace bnb::core
