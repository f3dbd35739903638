// The AVX-512 kernels of the 4-bit matrix-vector product (gemv4.h), for its dispatch in gemv4_hwy.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "bnb/core/dtype.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define BNB_GEMV4_X86 1
#else
#define BNB_GEMV4_X86 0
#endif

#if BNB_GEMV4_X86
namespace bnb::core::gemv4_x86 {

// They take whole 128-weight chunks of whole rows: K a multiple of this.
inline constexpr int64_t kChunk = 128;

// Whether the processor has AVX512-BW (the float32 kernel) and AVX512-BF16 (the bfloat16 one); CPUID. The caller
// checks that AVX-512 itself is dispatched (the cpu.isa cap).
bool HasAvx512Bw();
bool HasAvx512Bf16();
bool HasAvx512Fp16();

// Gemv4's contract (gemv4.h) for K % kChunk == 0 and rows with finite absmax (the caller takes the others to the
// definition). Products and sums in float32, each output rounded once to `dtype`.
//   - RowsF32 (any dtype of A, widened to float32): the 16 code values looked up by vpermps, one float32 product
//     per weight;
//   - RowsBf16 (A in bfloat16, AVX512-BF16): the code values rounded to bfloat16, looked up by vpermw, multiplied
//     in pairs by vdpbf16ps. Each weight's code value then carries a relative error of at most 2^-8, the rounding a
//     bfloat16 weight has (so the result is as exact as a bfloat16 product with a dequantized bfloat16 weight).
// Nested statistics' scales of blocks [b0, b1) into out[0, b1 - b0): code256[q[b]] * absmax2[b / 256] + offset,
// each operation rounded to float32 as NestedAbsmax defines them; 64 blocks at a time by byte-plane permutes with
// AVX512-VBMI, else 16 at a time by a gather.
void ExpandNested(const uint8_t* q, const float* code256, const float* absmax2, float offset, int64_t b0,
                  int64_t b1, float* out);

// Each takes A laid out in its lookup order (ArrangeF32 / ArrangeBf16: once per call, whatever the rows) and
// writes row m's float32 sum to acc[m - row_begin].
std::vector<float> ArrangeF32(DType dtype, const void* A, int64_t K);
std::vector<uint16_t> ArrangeBf16(const void* A, int64_t K);
void RowsF32(const float* a, const uint8_t* B, const float* absmax, const float* code16, int64_t K, int block_shift,
             float* acc, int64_t row_begin, int64_t row_end);
void RowsBf16(const uint16_t* a, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
              int block_shift, float* acc, int64_t row_begin, int64_t row_end);

// Small batches: M rows of A (each laid out as above, then interleaved by chunk per pass: PassOffset) times W's rows
// [n0, n1), one pass over those rows of W per kSmallRows rows of A: each chunk's code values are looked up once for
// all of them. acc[r * ldacc + n] gets row r's float32 sum for W's row n. SmallF32: RowsF32's products, their sums
// scaled at a block's end or a slice's (so close to RowsF32's rows, the same bits where no slice ends mid-block).
// SmallBf16: the dequantized weight rounded to bfloat16, round_bf16(code * absmax), times A's bfloat16 (as
// dequantize_4bit + F.linear in bfloat16), where RowsBf16 rounds the code values and scales per block in float32.
inline constexpr int kSmallRows = 8;
// Where chunk c of A's row r (of M, laid out) goes for SmallF32 / SmallBf16: the rows of each pass of kSmallRows
// interleaved by chunk, so a chunk's rows are one contiguous run. K apart (8 KB at K = 4096 in bfloat16) they fall
// into the same L1 sets: eight loads a chunk from rows 4 KB apart ran at a third of the speed of loads from one
// run (tools/bench/NOTES.md, 'Small batches: dequantized bfloat16 tables').
inline int64_t PassOffset(int64_t r, int64_t M, int64_t K, int64_t c) {
  const int64_t r0 = r / kSmallRows * kSmallRows;
  const int64_t rows = M - r0 < kSmallRows ? M - r0 : kSmallRows;
  return r0 * K + (c * rows + r - r0) * kChunk;
}
void SmallF32(const float* a, int64_t M, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
              int block_shift, float* acc, int64_t ldacc, int64_t n0, int64_t n1);
void SmallBf16(const uint16_t* a, int64_t M, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
               int block_shift, float* acc, int64_t ldacc, int64_t n0, int64_t n1);

}  // namespace bnb::core::gemv4_x86
#endif
