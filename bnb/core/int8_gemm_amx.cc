// The AMX kernel of the int8 product C = A B^T (int8_gemm.h): TDPBSSD, 16 x 16 x 64 signed products an instruction
// (vpdpbusd: 64), exact int32 sums as the definition's.
//
// Roles swapped: TDPBSSD's first operand takes 16 rows of B (a weight's rows, K contiguous) as they lie, 64 bytes
// of K a tile, and its second the same 64 bytes of K of 16 rows of A in the 4-byte interleave TDPBSSD asks of it
// (row r: each row's bytes 4r .. 4r + 3), so a C tile holds C^T (16 columns of C x 16 rows), stored and written out
// transposed. A, the smaller operand, is arranged per call (ArrangeRowTile), slices of its rows at most
// kArrangedBytes so a slice stays in L2 while every pair of B's tiles passes over it; B is read in place. 2 x 2 C
// tiles: each tile of A and of B loaded feeds two products. K must be a whole number of 64-byte steps, the columns
// whole tiles of 16 and the rows at least kAmxFromRows: other columns, K and row counts take the VNNI kernel.
#include "bnb/core/int8_gemm_x86.h"

#if BNB_INT8_GEMM_X86

// GCC 12's AVX-512 intrinsic headers leave placeholder operands uninitialized (as in gemm4_packed_amx.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "bnb/core/aligned64.h"
#include "bnb/core/amx_tiles.h"

#define BNB_TARGET_AMX_INT8 \
  __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")))

namespace bnb::core::int8_gemm_x86 {
namespace {

constexpr int64_t kTile = 16;                          // every tile's rows; a C tile's columns
constexpr int64_t kStep = 64;                          // bytes of K a product takes (a tile row)
constexpr int64_t kTileBytes = kTile * kStep;          // 1 KB
constexpr int64_t kArrangedBytes = int64_t{1} << 20;   // A's arranged rows per slice
// Fewer rows take the VNNI kernel: a tile's 16 rows mostly padding, AMX measured ~10% slower up to 4 rows and
// faster from 8 (433 against 525 us at 8 x 4096 x 4096; tools/bench/NOTES.md, 'int8 product on AMX').
constexpr int64_t kAmxFromRows = 8;

// Tiles 0, 1: B's; 2, 3: A's; 4 - 7: C's (4: B tile 0 x A tile 2, 5: 0 x 3, 6: 1 x 2, 7: 1 x 3). All 16 x 64 bytes.
constexpr uint8_t kTileRows[8] = {16, 16, 16, 16, 16, 16, 16, 16};

// Rows [0, rows) of A (rows <= 16) as K / 64 tiles of TDPBSSD's second operand: in tile s, row r holds, for each of
// the 16 rows m, A[m, 64 s + 4 r .. 64 s + 4 r + 3] (zeros for m >= rows).
void ArrangeRowTile(const int8_t* A, int64_t lda, int64_t rows, int64_t K, int8_t* out) {
  const int64_t steps = K / kStep;
  for (int64_t m = 0; m < kTile; ++m) {
    for (int64_t s = 0; s < steps; ++s) {
      int8_t* dst = out + s * kTileBytes + m * 4;
      if (m >= rows) {
        for (int64_t r = 0; r < kTile; ++r) std::memset(dst + r * kStep, 0, 4);
        continue;
      }
      const int8_t* src = A + m * lda + s * kStep;
      for (int64_t r = 0; r < kTile; ++r) std::memcpy(dst + r * kStep, src + 4 * r, 4);
    }
  }
}

// The 2 x 2 (or fewer: kB tiles of B, kA of A) C tiles over all of K: b the first of B's rows, a the arranged tiles
// of A's first row tile (the next row tile a_stride bytes on).
template <int kB, int kA>
BNB_TARGET_AMX_INT8 void Products(const int8_t* b, int64_t ldb, const int8_t* a, int64_t a_stride, int64_t steps) {
  _tile_zero(4);
  if constexpr (kA > 1) _tile_zero(5);
  if constexpr (kB > 1) _tile_zero(6);
  if constexpr (kB > 1 && kA > 1) _tile_zero(7);
  CompilerSeesTileLoads();
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(0, b + s * kStep, ldb);
    _tile_loadd(2, a + s * kTileBytes, kStep);
    _tile_dpbssd(4, 0, 2);
    if constexpr (kA > 1) {
      _tile_loadd(3, a + a_stride + s * kTileBytes, kStep);
      _tile_dpbssd(5, 0, 3);
    }
    if constexpr (kB > 1) {
      _tile_loadd(1, b + kTile * ldb + s * kStep, ldb);
      _tile_dpbssd(6, 1, 2);
      if constexpr (kA > 1) _tile_dpbssd(7, 1, 3);
    }
  }
}

// A C tile stored at `stored` (C^T: 16 columns x 16 rows) to C's rows [0, rows) and 16 columns from c: each row of
// C one gather of a column of the tile.
BNB_TARGET_AMX_INT8 void WriteTile(const int32_t* stored, int64_t rows, int32_t* c, int64_t ldc) {
  CompilerSeesTileLoads();
  const __m512i column = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  for (int64_t m = 0; m < rows; ++m) {
    const __m512i v = _mm512_i32gather_epi32(_mm512_add_epi32(column, _mm512_set1_epi32(static_cast<int>(m))),
                                             stored, 4);
    _mm512_storeu_si512(c + m * ldc, v);
  }
}

// GCC's _tile_stored takes the tile's number as a literal.
#define BNB_WRITE_TILE(t, rows, c)        \
  do {                                    \
    _tile_stored(t, stored, kTile * 4);   \
    WriteTile(stored, rows, c, ldc);      \
  } while (0)

template <int kB, int kA>
BNB_TARGET_AMX_INT8 void Block(const int8_t* b, int64_t ldb, const int8_t* a, int64_t steps, int64_t rows,
                               int32_t* c, int64_t ldc, int32_t* stored) {
  const int64_t a_stride = steps * kTileBytes;
  Products<kB, kA>(b, ldb, a, a_stride, steps);
  const int64_t rows0 = std::min(rows, kTile), rows1 = rows - rows0;
  BNB_WRITE_TILE(4, rows0, c);
  if constexpr (kA > 1) BNB_WRITE_TILE(5, rows1, c + kTile * ldc);
  if constexpr (kB > 1) {
    BNB_WRITE_TILE(6, rows0, c + kTile);
    if constexpr (kA > 1) BNB_WRITE_TILE(7, rows1, c + kTile * ldc + kTile);
  }
}

#undef BNB_WRITE_TILE

}  // namespace

bool HasAmxInt8() {
  static const bool has = HasAvx512Vnni() && __builtin_cpu_supports("amx-int8") && AmxTileStateGranted();
  return has;
}

BNB_TARGET_AMX_INT8 void GemmAmxInt8(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M,
                                     int64_t K, int64_t n0, int64_t n1, int32_t* C, int64_t ldc) {
  const int64_t tiles_n = M >= kAmxFromRows && K > 0 && K % kStep == 0 ? (n1 - n0) / kTile : 0;
  const int64_t amx_end = n0 + tiles_n * kTile;
  if (tiles_n > 0) {
    const int64_t steps = K / kStep;
    const int64_t slice = std::min((M + kTile - 1) / kTile * kTile,
                                   std::max(kTile, kArrangedBytes / K / kTile * kTile));
    Aligned64<int8_t> arranged(slice * K);
    alignas(64) int32_t stored[kTile * kTile];
    ConfigureTiles(kTileRows);
    for (int64_t m0 = 0; m0 < M; m0 += slice) {
      const int64_t rows = std::min(slice, M - m0), row_tiles = (rows + kTile - 1) / kTile;
      for (int64_t i = 0; i < row_tiles; ++i) {
        ArrangeRowTile(A + (m0 + i * kTile) * lda, lda, std::min(kTile, rows - i * kTile), K,
                       arranged.data() + i * steps * kTileBytes);
      }
      for (int64_t j = 0; j < tiles_n; j += 2) {
        const int64_t n = n0 + j * kTile;
        const int8_t* b = B + n * ldb;
        for (int64_t i = 0; i < row_tiles; i += 2) {
          const int8_t* a = arranged.data() + i * steps * kTileBytes;
          const int64_t r = std::min(2 * kTile, rows - i * kTile);
          int32_t* c = C + (m0 + i * kTile) * ldc + n;
          const bool two_b = j + 1 < tiles_n, two_a = i + 1 < row_tiles;
          if (two_b && two_a) {
            Block<2, 2>(b, ldb, a, steps, r, c, ldc, stored);
          } else if (two_b) {
            Block<2, 1>(b, ldb, a, steps, r, c, ldc, stored);
          } else if (two_a) {
            Block<1, 2>(b, ldb, a, steps, r, c, ldc, stored);
          } else {
            Block<1, 1>(b, ldb, a, steps, r, c, ldc, stored);
          }
        }
      }
    }
    ReleaseTiles();
  }
  if (amx_end < n1) GemmAvx512Vnni(A, lda, B, ldb, M, K, amx_end, n1, C, ldc);
}

}  // namespace bnb::core::int8_gemm_x86

#endif  // BNB_INT8_GEMM_X86
