// A CPU layout of a 4-bit weight for the matrix product (gemv4.h's W, N x K, bitsandbytes' row-major packing), made
// once when a layer is used on the CPU: rows in tiles of 16, so one stream of bytes feeds 16 rows at a time, each
// load of A serves all of them, and a tile's 16 block scales are one vector.
//
// Tile t holds W's rows 16t .. 16t + 15 (rows past N: code 0 and scale 0, so they sum to 0). Its K columns are
// groups of 64; group g of tile t is 512 bytes at codes + (t * K / 64 + g) * 512, in 16 runs of 32 bytes. Byte
// 2j + e of run p holds, for the tile's row j and e in {0, 1}:
//   low nibble:  the code of column 64g + 2p + e
//   high nibble: the code of column 64g + 32 + 2p + e
// so a run widened to 16-bit lanes puts row j's column pair (k, k + 1) in one 32-bit lane (what vdpbf16ps takes),
// and widened to 32-bit lanes, half a run puts 8 rows' pairs side by side (the float32 kernels).
// Scales: blocks lie within rows (K % blocksize == 0), and tile t's block c (columns c * blocksize ...) has its 16
// rows' absmax at scales + (t * K / blocksize + c) * 16.
#pragma once

#include <cstdint>
#include <vector>

#include "bnb/core/dtype.h"

namespace bnb::core {

inline constexpr int64_t kPackRows = 16;   // rows per tile
inline constexpr int64_t kPackCols = 64;   // columns per group
inline constexpr int64_t kPackGroupBytes = kPackRows * kPackCols / 2;
// The blocked product (Gemm4Packed): columns of K per partial sum, rows of A per micro-block.
inline constexpr int64_t kBlockedCols = 256;
inline constexpr int64_t kBlockedRows = 12;

// The shapes the layout takes: K a positive multiple of 64, blocksize a power of two >= 64 dividing K, N >= 1.
bool Packed4Fits(int64_t N, int64_t K, int64_t blocksize);
inline int64_t Packed4Tiles(int64_t N) { return (N + kPackRows - 1) / kPackRows; }
inline int64_t Packed4CodeBytes(int64_t N, int64_t K) { return Packed4Tiles(N) * kPackRows * K / 2; }
inline int64_t Packed4ScaleCount(int64_t N, int64_t K, int64_t blocksize) {
  return Packed4Tiles(N) * kPackRows * (K / blocksize);
}

struct Packed4 {
  const uint8_t* codes;
  const float* scales;
  int64_t N, K, blocksize;
};

// Tiles [t0, t1) of the layout from B (blockwise4.h packing) and absmax (one float per block, all finite: rows with
// an infinite or NaN scale follow gemv4.h's definition, which this layout does not keep). Threads may split tiles.
void Pack4(const uint8_t* B, const float* absmax, int64_t N, int64_t K, int64_t blocksize, uint8_t* codes,
           float* scales, int64_t t0, int64_t t1);

// The inverse: bitsandbytes' bytes of W's rows in tiles [t0, t1) (those below N), row n at B + n * K / 2.
void Unpack4(const uint8_t* codes, int64_t N, int64_t K, uint8_t* B, int64_t t0, int64_t t1);

// W's rows in tiles [t0, t1) (those below N) dequantized in `dtype` (float32, float16 or bfloat16), row-major from
// out (row n at out + (n - 16 * t0) * K elements): each value code16[code] * scale rounded once,
// DequantizeBlockwise4's values (blockwise4.h) for the weight's bytes and scales. A tile at a time through
// bitsandbytes' bytes, in a buffer that stays in cache.
void DequantizePacked4(DType dtype, const Packed4& w, const float* code16, void* out, int64_t t0, int64_t t1);

// Rows of A from which the weight dequantized (DequantizePacked4) and multiplied densely beats slices of
// Gemm4Packed's rows; 0 where it never does.
int64_t Gemm4PackedDenseFrom(DType dtype, bool bf16_products = true);

// Whether Gemm4Packed runs for A of `dtype` and M rows on this CPU under the cpu.isa cap: AVX-512 with AVX512-BW,
// bfloat16 products (bfloat16 A, AVX512-BF16, bf16_products: gemv4.h's knob) up to 64 rows (on AMX tiles, cpu.amx:
// 256), where they beat dequantize + matmul; float32 products at any rows.
bool Gemm4PackedRuns(DType dtype, int64_t M, bool bf16_products = true);
// The kernel Gemm4Packed takes for M rows of A of `dtype` on this CPU now (the cpu.isa cap, cpu.amx): "amx"
// (TDPBF16PS: where "avx512bf16" would run, from 3 rows, where the CPU has AMX-BF16), "avx512bf16", "avx512"
// (float32 products), "avx512-blocked" (float32 products from 24 rows) or "none" (Gemm4PackedRuns says no).
const char* Gemm4PackedKernelName(DType dtype, int64_t M, bool bf16_products = true);
// The most rows of A one Gemm4Packed call takes for `dtype` (0 where it has no kernel; the int64_t maximum where
// it takes any); callers with more run it on slices of A's rows (the weight read once per slice: as fast as
// dequantize + matmul there).
int64_t Gemm4PackedMaxRows(DType dtype, bool bf16_products = true);

// How a product of M rows of A by N rows of W splits over `tasks` threads: row_parts slices of A's rows (row_rows
// rows each, the last the rest) times tile_parts equal ranges of W's tiles. Only the blocked kernel splits rows: each
// task arranges its rows of A over all of K once (~0.37 ns an element here) and dequantizes its tiles once per
// slice (~0.09 ns a weight, its codes read included) beside ~0.0125 ns a multiply-add, so with many threads and few
// tiles each, slices of rows cost less than the arranging every thread repeats; other kernels take one slice.
struct Packed4Split {
  int64_t row_parts, row_rows, tile_parts;
};
Packed4Split Gemm4PackedSplit(DType dtype, int64_t M, int64_t N, int64_t tasks, bool bf16_products = true);

// out[r, n] = sum_k A[r, k] * W[n, k] (+ bias[n]) for the M rows of A (row-major, K apart, `dtype`) and W's rows in
// tiles [t0, t1) (those below N), out row-major (N apart) and bias (N values or null) in `dtype`; each output
// rounded once from float32. The products, as Gemv4's kernels define them (gemv4.h):
//   - bfloat16 A (bf16_products): the code values rounded to bfloat16, multiplied by vdpbf16ps, each group's sums
//     scaled in float32 (as exact as a bfloat16 product with a dequantized bfloat16 weight); on AMX tiles (from 3
//     rows where Gemm4PackedKernelName says "amx") the weight itself, code value times scale in float32 rounded
//     to bfloat16 (dequantize + a bfloat16 product's values), multiplied by TDPBF16PS, summed in float32;
//   - any other A (float32, float16, or bfloat16 without bf16_products): float32 products of the exact code values,
//     each group's sums scaled in float32; from 24 rows (Gemm4PackedKernelName says "avx512-blocked") A in float32
//     times the weight itself, code value times scale in float32 (DequantizePacked4's values: dequantize + a
//     float32 product): for each kBlockedCols columns of K, a sum from zero by fused multiply-adds in K's order,
//     these sums added in order (exactly so: a row's result is the same whatever the other rows).
// Sums run in another order than the definition: close to it, not bit for bit (integer data below 2^24 exactly).
// A scale that is infinite or NaN enters as a factor of its block's sum (AMX, blocked: of its block's weights;
// gemv4.h's rows with one follow the definition instead; callers that want that keep such weights unpacked). Only
// where Gemm4PackedRuns says so.
void Gemm4Packed(DType dtype, const void* A, int64_t M, const Packed4& w, const float* code16, const void* bias,
                 void* out, int64_t t0, int64_t t1, bool bf16_products = true);

// The product with int8 activations (opt-in: gemm_4bit_packed's int8_activations; llama.cpp's way), its definition
// (bnb/python/bnb/reference/blockwise4.py has it in torch; the kernel matches it bit for bit):
//   - each row of A, in float32, is quantized per group of 64 columns: sa = max|a| / 127, q = a / sa rounded to
//     nearest (ties to even) and clamped to [-127, 127]; a group of zeros has q = 0, and a group holding an infinite
//     or NaN value q = 0 and sa = NaN (its rows' outputs are NaN);
//   - the 16 code values become round(127 * code) (ties to even; the codes must lie in [-1, 1]);
//   - out[r, n] = the sum over groups g in order, from 0, of float(dot) * (step * scale), where dot is the group's
//     exact integer sum of q * value, step = max|a| / 127^2 (q's step sa times the values' 1 / 127; NaN for a
//     group that is not finite) and scale the weight's block scale, each product and sum rounded in float32 (no
//     fused multiply-add); plus bias[n] in float32; rounded once to A's dtype.
// Whether it runs: AVX512-VNNI under the cpu.isa cap (vpdpbusd: 64 products an instruction, twice vdpbf16ps').
bool Gemm4PackedInt8Runs();

// The code values as int8 (values16[i] = round(127 * code16[i])); false, values16 untouched, where a code value is
// outside [-1, 1] or NaN (the index of the first such value in *bad).
bool Int8CodeValues(const float* code16, int8_t* values16, int* bad);

// A quantized as the definition says, arranged for the kernel: group g's row r at q + (g * M + r) * 64, each
// 4-byte lane p holding columns 2p, 2p + 1, 32 + 2p, 33 + 2p (a weight run's order), its step at step[g * M + r]
// and -128 * (the sum of its q) at offset[g * M + r] (the kernel multiplies codes biased by 128: vpdpbusd takes
// unsigned weights). Only where Gemm4PackedInt8Runs says so.
struct Int8Activations {
  int64_t M, K;
  std::vector<int8_t> q;
  std::vector<float> step;
  std::vector<int32_t> offset;
};
Int8Activations QuantizeActivationsInt8(DType dtype, const void* A, int64_t M, int64_t K);

// Tiles [t0, t1) of the product by the definition above, out and bias as Gemm4Packed's. Only where
// Gemm4PackedInt8Runs says so.
void Gemm4PackedInt8(DType dtype, const Int8Activations& a, const Packed4& w, const int8_t* values16,
                     const void* bias, void* out, int64_t t0, int64_t t1);

}  // namespace bnb::core
