// The AVX-512 kernels of the packed 4-bit product (gemm4_packed.h), one tile of 16 rows of W at a time.
#pragma once

#include <cstdint>

#include "bnb/core/gemm4_packed.h"
#include "bnb/core/gemv4_x86.h"  // BNB_GEMV4_X86

#if BNB_GEMV4_X86
namespace bnb::core::packed4_x86 {

// Tile t's codes in the layout from B (bitsandbytes' packing, N x K), all 16 of its rows below N: Pack4's
// permutation by 8 x 8 transposes of 16-bit words (AVX2 instructions; called where the AVX-512 kernels run). With
// `stream`, codes (64-byte aligned) are written by streaming stores (stream_stores.h).
void PackTileCodes(const uint8_t* B, int64_t K, int64_t t, uint8_t* codes, bool stream);
// The inverse for a whole tile: its 16 rows' bitsandbytes bytes, row j at rows + j * K / 2.
void UnpackTileCodes(const uint8_t* codes, int64_t K, int64_t t, uint8_t* rows);

// The rows of a whole tile's sums (sums[r * sums_ld + j]), plus add[j] where add is not null, each rounded once to
// dtype into out + r * ld (elements), as StoreFromFloat rounds them (FloatToBF16, FloatToHalf: every NaN the same
// bits but its sign).
void StoreTileRows(DType dtype, const float* sums, int64_t sums_ld, int64_t rows, const float* add, void* out,
                   int64_t ld);

// Each writes tile t's float32 sums for the rows of A: sums[r * 16 + j] for A's row r and the tile's row j.
// table32: the 16 code values rounded to bfloat16, twice (vpermw reads 5 index bits): Bf16CodeTable.
void Bf16CodeTable(const float* code16, uint16_t* table32);
// One row of bfloat16 A: unscaled bfloat16 code values by vdpbf16ps, each block's sums scaled in float32.
void TileBf16One(const uint16_t* a, const Packed4& w, const uint16_t* table32, int64_t t, float* sums);
// M rows of bfloat16 A, arranged by group (group g's row r at a + (g * M + r) * 64): as TileBf16One, each run looked
// up once per pass of up to 16 rows, each group's sums scaled in float32.
void TileBf16Rows(const uint16_t* a, int64_t M, const Packed4& w, const uint16_t* table32, int64_t t,
                  float* sums);

// AMX (gemm4_packed_amx.cc). HasAmxBf16: AMX-TILE and AMX-BF16 here, and Linux granted this process the tile state
// (asked once). A's rows go in row tiles of AmxTileRows(M) rows (M <= 16: M, else 16), AmxRowTiles(M) of them, the
// rows past M zero; AmxArrange copies bfloat16 A (M x K) into that layout (AmxArrangedValues(M, K) values, aligned
// to 64 bytes): row tile i, group g, half h (32 columns), row r at ((i * K / 64 + g) * 2 + h) * 32 * rows + r * 32,
// so each tile of A is 1 KB in one piece and a pass reads its row tiles' groups in order. AmxTiles configures
// this thread's tiles for rows for its lifetime and releases them after.
// Inside an AmxTiles' lifetime, against tile t (TileBf16Amx) or tiles t and t + 1 (TilePairBf16Amx: each A and
// B tile it loads feeds two products, for more than 4 row tiles): sums[r * 16 + j] (sums1: tile t + 1's) for A's
// row r and the tile's row j, as TileBf16Rows writes them, over all of K of bfloat16 A times the weight rounded to
// bfloat16 (code value times scale in float32, rounded once: dequantize + a bfloat16 product's values); the pair
// kernel over groups [g_begin, g_end) of K (g_begin a multiple of kAmxChunk), adding to the sums there unless
// g_begin is 0, so a caller can run all its tiles over one block of K, whose A stays in L2, then the next. sums:
// 16 * 16 * AmxRowTiles(M) floats, aligned to 64 bytes. b: work, kAmxWorkValues bfloat16 values aligned to 64
// bytes (the pair kernel's B tiles for kAmxChunk groups; TileBf16Amx uses two groups' worth).
inline constexpr int64_t kAmxChunk = 4;
inline constexpr int64_t kAmxGroupValues = 4 * 16 * 32;  // four B tiles
inline constexpr int64_t kAmxWorkValues = kAmxChunk * kAmxGroupValues;
inline int64_t AmxTileRows(int64_t M) { return M < kPackRows ? M : kPackRows; }
inline int64_t AmxRowTiles(int64_t M) { return (M + kPackRows - 1) / kPackRows; }
inline int64_t AmxArrangedValues(int64_t M, int64_t K) { return AmxRowTiles(M) * AmxTileRows(M) * K; }
void AmxArrange(const uint16_t* A, int64_t M, int64_t K, uint16_t* a);
bool HasAmxBf16();
class AmxTiles {
 public:
  explicit AmxTiles(int64_t rows);
  ~AmxTiles();
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};
void TileBf16Amx(const uint16_t* a, int64_t M, const Packed4& w, const float* code16, int64_t t, uint16_t* b,
                 float* sums);
void TilePairBf16Amx(const uint16_t* a, int64_t M, const Packed4& w, const float* code16, int64_t t, int64_t g_begin,
                     int64_t g_end, uint16_t* b, float* sums0, float* sums1);

// One row of float32 A: exact code values, float32 multiply-adds, each block's sums scaled in float32.
void TileF32One(const float* a, const Packed4& w, const float* code16, int64_t t, float* sums);
// M rows of float32 A, arranged as TileBf16Rows takes them: as TileF32One, each half run looked up once per pass of
// up to 8 rows, each group's sums scaled in float32. sums holds 3 * 16 * M floats (the last 2 * 16 * M: work).
void TileF32Rows(const float* a, int64_t M, const Packed4& w, const float* code16, int64_t t, float* sums);

// The blocked float32 product (gemm4_blocked_x86.cc), for many rows of A: the weight dequantized (code value times
// scale in float32, DequantizePacked4's values) a panel at a time, two tiles by up to kBlockedCols columns of K,
// and multiplied into micro-blocks of kBlockedRows rows of A by float32 multiply-adds, as a dense product would
// multiply a dequantized weight. kBlockedCols and kBlockedRows: gemm4_packed.h. Buffers aligned to 64 bytes.
//   - BlockedPanel: tiles t and t + 1 (tiles = 2; tiles = 1: t only, the second half zeros) over K's columns
//     [k0, k0 + kc) (multiples of 64) into panel (kc * 32 floats): panel[k * 32 + 16 h + j] tile t + h's row j.
//   - BlockedArrange: A's (M x K, `dtype`) rows [r0, r0 + rows) over the same columns, in float32, into a (rows
//     rounded up to kBlockedRows, times kc, floats; the rows past r0 + rows zeros): micro-block b's column k at
//     a + (b * kc + k) * kBlockedRows.
//   - BlockedRows: the arranged rows times the panel into c (rows x 32 floats, row i at c + 32 i), added to c's
//     values where `accumulate`.
void BlockedPanel(const Packed4& w, const float* code16, int64_t t, int64_t tiles, int64_t k0, int64_t kc,
                  float* panel);
void BlockedArrange(DType dtype, const void* A, int64_t K, int64_t r0, int64_t rows, int64_t k0, int64_t kc,
                    float* a);
void BlockedRows(const float* a, int64_t rows, const float* panel, int64_t kc, float* c, bool accumulate);

// int8 activations (gemm4_packed.h's definition; the kernel needs AVX512-VNNI). QuantizeInt8 fills an
// Int8Activations' q, step and offset from A (M x K, `dtype`) as the definition says. TileInt8Rows writes tile t's sums
// for the activations' rows [r0, r0 + rows): sums[(r - r0) * 16 + j]. table64: the 16 code values plus 128, as bytes,
// in each of the four 16-byte lanes (vpshufb looks up within a lane).
void QuantizeInt8(DType dtype, const void* A, Int8Activations& a);
void TileInt8Rows(const Int8Activations& a, int64_t r0, int64_t rows, const Packed4& w, const uint8_t* table64,
                  int64_t t, float* sums);

}  // namespace bnb::core::packed4_x86
#endif
