// Matrix-vector product with a 4-bit weight: out = W A, W dequantized on the fly (bitsandbytes' gemv_4bit).
//
// W is an N x K row-major matrix quantized by QuantizeBlockwise4 as one flat tensor of N * K elements: element
// (m, k) is flat element m * K + k, its code sits in nibble m * K + k of B (blockwise4.h packing) and its block is
// (m * K + k) / blocksize, so blocks run across row ends when K is not a multiple of blocksize. Its value is
//   W[m, k] = code16[code] * absmax[block]        (float32 product)
// where code16 holds 16 values in code order (the `code` tensor of gemv_4bit; Code4(q).data() for NF4 / FP4).
#pragma once

#include <cstdint>
#include <vector>

#include "bnb/core/dtype.h"

namespace bnb::core {

// Rows [row_begin, row_end) of out = W A: A has K elements of `dtype`, out has N elements of `dtype` (only the rows
// in range are written). Products and sums are float32; each output is rounded once to `dtype`, to nearest even.
// blocksize: a power of two in [32, 4096] (CheckBlocksize). Threads may split the rows.
//
// The vectorized versions sum in their own order (unscaled code values per group of weights, then times absmax): it
// is not bit-identical to Gemv4Scalar, only close (float32 rounding of a differently ordered sum). Integer-valued
// inputs whose partial sums stay below 2^24 give identical results, and so do rows with an infinite or NaN
// absmax, which follow the definition (so NaN comes out where the dense product gives NaN).
// bf16_products: whether bfloat16 A may take a kernel that rounds the code values to bfloat16 (knob
// cpu.gemv_bf16_products; ActiveGemv4Kernel).
void Gemv4(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
           int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end, bool bf16_products = true);

// Nested statistics (bitsandbytes' compress_statistics): the absmax of block b is
//   code256[q[b]] * absmax2[b / kNestedBlocksize] + offset       (product, then sum, each rounded to float32)
// which is what dequantize_blockwise of the 8-bit codes, plus the offset, gives.
inline constexpr int64_t kNestedBlocksize = 256;
struct NestedAbsmax {
  const uint8_t* q;        // one code per block of W
  const float* code256;    // the 8-bit codebook
  const float* absmax2;    // one per kNestedBlocksize codes of q
  float offset;
};

// Gemv4 with nested statistics: the same result as Gemv4 with the absmax they give, without a full absmax array:
// the rows are taken in bands whose blocks' absmax (a few KB) are expanded just before their use.
void Gemv4Nested(DType dtype, const void* A, const uint8_t* B, const NestedAbsmax& absmax, const float* code16,
                 int64_t N, int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end,
                 bool bf16_products = true);

// Small batches: out[r, n] = sum_k A[r, k] * W[n, k] (+ bias[n]) for the M rows of A (row-major, K apart) and W's
// rows [n0, n1), with out row-major (N apart) and bias (N values or null) of `dtype` like A. Each chunk of W's row
// is dequantized in registers once for a pass of A's rows; each output is its row's sum (bfloat16 A on the
// kAvx512Bf16 kernel: of the dequantized weight rounded to bfloat16, gemv4_x86.h; else float32 products of the
// definition's weights) plus the bias, in float32, rounded once. nested: null, or the statistics absmax stands for
// (then absmax is unused). The kHighway kernel multiplies the exact code values, in float32, as Gemv4's kHighway
// kernel does: each row's output has the bits Gemv4 with exact code values gives that row alone (for bfloat16 A:
// bf16_products false; the kAvx512 kernel's are close, scaled per slice of K). Only where Gemm4SmallRuns says so: 1
// to kSmallMaxRows rows with the AVX-512 kernels, or 1 to kSmallMaxRowsHighway rows and K a multiple of kSmallK up
// to kSmallMaxK (the one-row kernel's slice of K) on Highway's vector targets; otherwise callers dequantize W and
// multiply (beyond those rows dequantize + addmm in bands measured faster: tools/bench/NOTES.md, 'Small batches: up
// to 32 rows in bfloat16' and 'Small batches without the AVX-512 kernels').
inline constexpr int64_t kSmallMaxRows = 32, kSmallMaxRowsHighway = 64, kSmallK = 128, kSmallMaxK = 65536;
bool Gemm4SmallRuns(DType dtype, int64_t M, int64_t K, bool bf16_products = true);
enum class Gemm4SmallKernel { kNone, kHighway, kAvx512, kAvx512Bf16 };
Gemm4SmallKernel ActiveGemm4SmallKernel(DType dtype, int64_t M, int64_t K, bool bf16_products = true);
const char* Gemm4SmallKernelName(Gemm4SmallKernel kernel);  // "none", "highway", "avx512", "avx512bf16"

// Whether a dense product in `dtype` (torch's, on the dequantized weight) runs on instructions made for it here:
// float32 always; on x86 bfloat16 with AVX512-BF16, float16 with AVX512-FP16, each under an avx3 (or better) cpu.isa
// cap. Without them torch widens 16-bit operands element by element (about 3x slower than its float32 product), so
// the callers multiply in float32 and round the result once. Other architectures: true (not measured).
bool NativeProducts(DType dtype);
// A laid out for the kernel ActiveGemm4SmallKernel names (kNone: nothing), once per call: the threads that split
// W's rows share it. A itself must outlive it (rows with a non-finite absmax read it).
struct Gemm4SmallA {
  Gemm4SmallKernel kernel;
  DType dtype;
  const void* A;
  int64_t M, K;
  std::vector<float> a32;
  std::vector<uint16_t> a16;
};
Gemm4SmallA ArrangeGemm4Small(DType dtype, const void* A, int64_t M, int64_t K, bool bf16_products = true);
void Gemm4Small(const Gemm4SmallA& a, const uint8_t* B, const float* absmax, const NestedAbsmax* nested,
                const float* code16, int64_t N, int64_t blocksize, const void* bias, void* out, int64_t n0,
                int64_t n1);
// Both steps at once.
void Gemm4Small(DType dtype, const void* A, int64_t M, const uint8_t* B, const float* absmax,
                const NestedAbsmax* nested, const float* code16, int64_t N, int64_t K, int64_t blocksize,
                const void* bias, void* out, int64_t n0, int64_t n1, bool bf16_products = true);

// Which kernel Gemv4 runs for A of `dtype` and rows of K elements, now (the cpu.isa cap and the processor decide):
//   - kAvx512Bf16: bfloat16 A, K a multiple of 128, AVX-512 dispatched and AVX512-BF16, bf16_products: the code
//     values rounded to
//     bfloat16 and multiplied by vdpbf16ps, so each weight's code value carries a relative error of at most 2^-8
//     (what a dequantized bfloat16 weight carries; gemv4_x86.h);
//   - kAvx512: any other dtype, K a multiple of 128, AVX-512 dispatched: float32 products of the exact code values;
//   - kHighwayBf16: the per-target kernel of gemv4_hwy.cc for the other bfloat16 A with bf16_products, on vector
//     targets: the code values rounded to bfloat16 as kAvx512Bf16 rounds them, float32 products and sums;
//   - kHighway: the rest, that kernel with the exact code values (the scalar target: the definition).
enum class Gemv4Kernel { kHighway, kHighwayBf16, kAvx512, kAvx512Bf16 };
Gemv4Kernel ActiveGemv4Kernel(DType dtype, int64_t K, bool bf16_products = true);
const char* Gemv4KernelName(Gemv4Kernel kernel);  // "highway", "highway_bf16", "avx512", "avx512bf16"
bool IsAvx512(Gemv4Kernel kernel);                 // kAvx512 or kAvx512Bf16
// Whether the kernel multiplies the code values rounded to bfloat16 (each then off by at most 2^-8 of itself:
// bfloat16 keeps 8 significant bits).
inline bool RoundsCodesToBf16(Gemv4Kernel kernel) {
  return kernel == Gemv4Kernel::kAvx512Bf16 || kernel == Gemv4Kernel::kHighwayBf16;
}

// log2(blocksize), for a power of two: the kernels find a block as element >> BlockShift(blocksize).
int BlockShift(int64_t blocksize);

// Whether row m has a block with an infinite or NaN absmax: such rows take the definition (see Gemv4).
bool RowHasNonFiniteAbsmax(const float* absmax, int64_t m, int64_t K, int block_shift);

// Row m of the definition below, as float32 before the output's rounding.
float Gemv4RowScalar(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16,
                     int64_t K, int64_t blocksize, int64_t m);

// The definition: for each row, acc = 0.0f, then for k = 0, 1, ..., K - 1 in order
//   acc = acc + float(A[k]) * W[m, k]     (product and sum each rounded to float32; no fused multiply-add)
// and out[m] = acc rounded to `dtype`.
void Gemv4Scalar(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
                 int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end);

}  // namespace bnb::core
