// The AMX kernel of the packed 4-bit product (gemm4_packed_x86.h): bfloat16 A against the tiled layout by
// TDPBF16PS, 16 x 16 x 32 products an instruction (vdpbf16ps: 32), compiled with target attributes as
// gemv4_x86.cc's kernels are.
//
// A group of the layout (16 rows of W x 64 columns, 16 runs of 32 bytes) becomes two B tiles: run p, each half
// (8 rows' column pairs) widened to 32-bit lanes, looked up by vpermps, multiplied by its rows' block scales and
// rounded to bfloat16 (vcvtne2ps2bf16 joins the halves) is row p of the tile of the group's first 32 columns (its
// 32-bit lane j: row j's column pair 2p, 2p + 1, the pair TDPBF16PS takes); the high nibbles give the tile of the
// next 32. The weight is scaled before the product, not each group's sums after (as the vdpbf16ps kernels do), so
// a C tile sums over all of K without leaving the tile unit: stored and scaled every group, C's tiles ran at a
// third of the unit's rate. Up to 4 row tiles of A (4 C tiles) take a tile of W at a time, each group's B tiles
// made into a buffer of two groups, in L1: the whole tile's (128 KB at K = 4096) made once for all passes spilled
// to L2, 3x slower. More row tiles take two tiles of W at a time over chunks of kAmxChunk groups: 2 x 2 C tiles,
// so every A and B tile loaded feeds two products (A's tiles come from L2 at these sizes), and a chunk's B tiles,
// made by its first pass over two row tiles, stay in L1 for the others. A is arranged (AmxArrange) so each tile
// of it is 1 KB in one piece: rows K apart share one L1 set where K * 2 bytes is a multiple of 4 KB, and half
// rows 128 bytes apart cost the A tile's loads two lines each.
#include "bnb/core/gemm4_packed_x86.h"

#include "bnb/core/amx_tiles.h"

#if BNB_GEMV4_X86

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define BNB_TARGET_AMX \
  __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace bnb::core::packed4_x86 {
namespace {

#include "bnb/core/gemm4_packed_x86-inl.h"  // kAhead, PairScales

bool AskForTiles() {
  return gemv4_x86::HasAvx512Bf16() && __builtin_cpu_supports("amx-bf16") && AmxTileStateGranted();
}

// Tiles: A's two 32-column halves of a group (0, 1), W's (2, 3), the sums of up to 4 row tiles of A (4 - 7).
void ConfigureTilesFor(int64_t rows) {
  const auto r = static_cast<uint8_t>(rows);
  const uint8_t tile_rows[8] = {r, r, 16, 16, r, r, r, r};
  ConfigureTiles(tile_rows);
}

// A group's codes and its scales, fetched into L2 ahead of its decode: into L1 (NTA) they would be lost to
// A's tiles streaming through it before the decode comes (tools/bench/NOTES.md, 'AMX: tile pairs').
BNB_TARGET_AMX inline void PrefetchForDecode(const uint8_t* run, const float* scales) {
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(run + 64 * l), _MM_HINT_T1);
  _mm_prefetch(reinterpret_cast<const char*>(scales), _MM_HINT_T1);
}

// Every tile's rows are 64 bytes: A's 32 bfloat16 (a group's half), B's 16 column pairs, C's 16 float32.
constexpr int64_t kRow = 64;

// One group's B tiles (1 KB each, lo then hi) from its runs, the code values table and its block's scales.
BNB_TARGET_AMX inline void DecodeGroup(const uint8_t* run, __m512 table, __m512 slo, __m512 shi, uint16_t* lo,
                                       uint16_t* hi) {
#pragma GCC unroll 16
  for (int p = 0; p < 16; ++p) {
    const __m512i x0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(run + 32 * p)));
    const __m512i x1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(run + 32 * p + 16)));
    const __m512 l0 = _mm512_mul_ps(_mm512_permutexvar_ps(x0, table), slo);
    const __m512 l1 = _mm512_mul_ps(_mm512_permutexvar_ps(x1, table), shi);
    const __m512 h0 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x0, 4), table), slo);
    const __m512 h1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x1, 4), table), shi);
    _mm512_store_si512(lo + 32 * p, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(l1, l0)));
    _mm512_store_si512(hi + 32 * p, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(h1, h0)));
  }
}

// Row tile i of a pass (C tile 4 + i) against half h of a group's B tiles (loaded, tile 2 + h): C += A B, A's half
// loaded into tile i % 2. A pass runs the first halves of all its row tiles, then the second ones: one C tile's
// two products in a row would wait for each other. (GCC's tile intrinsics paste their tile numbers into the
// instruction's text: literals only.)
template <int kI, int kH>
BNB_TARGET_AMX inline void HalfProduct(const uint16_t* a) {
  constexpr int kCase = 2 * kI + kH;
  if constexpr (kCase == 0) {
    _tile_loadd(0, a, kRow);
    _tile_dpbf16ps(4, 0, 2);
  } else if constexpr (kCase == 1) {
    _tile_loadd(0, a, kRow);
    _tile_dpbf16ps(4, 0, 3);
  } else if constexpr (kCase == 2) {
    _tile_loadd(1, a, kRow);
    _tile_dpbf16ps(5, 1, 2);
  } else if constexpr (kCase == 3) {
    _tile_loadd(1, a, kRow);
    _tile_dpbf16ps(5, 1, 3);
  } else if constexpr (kCase == 4) {
    _tile_loadd(0, a, kRow);
    _tile_dpbf16ps(6, 0, 2);
  } else if constexpr (kCase == 5) {
    _tile_loadd(0, a, kRow);
    _tile_dpbf16ps(6, 0, 3);
  } else if constexpr (kCase == 6) {
    _tile_loadd(1, a, kRow);
    _tile_dpbf16ps(7, 1, 2);
  } else {
    _tile_loadd(1, a, kRow);
    _tile_dpbf16ps(7, 1, 3);
  }
}

// Half h of a group against kCount row tiles of A (row tile i's at a + i * step).
template <int kCount, int kH>
BNB_TARGET_AMX inline void HalfProducts(const uint16_t* a, int64_t step) {
  HalfProduct<0, kH>(a);
  if constexpr (kCount > 1) HalfProduct<1, kH>(a + step);
  if constexpr (kCount > 2) HalfProduct<2, kH>(a + 2 * step);
  if constexpr (kCount > 3) HalfProduct<3, kH>(a + 3 * step);
}

// A pass of kCount (1-4) row tiles of A from row tile i0 (A's row tile i at a + i * step) against the tile of W
// at codes, scales, their sums stored to sums (row tile i's rows at sums + 256 i). Each group's B tiles are made
// into b (two groups' worth, 4 KB, so they stay in L1 and one group's stores need not wait on the other's loads).
template <int kCount>
BNB_TARGET_AMX void Pass(const uint16_t* a, int64_t step, int64_t rows, int64_t i0, int64_t groups, uint16_t* b,
                         const uint8_t* codes, const float* scales, int64_t per_block, __m512 table, float* sums) {
  const int64_t half = rows * kPackCols / 2;  // A's second half of a group
  _tile_zero(4);
  if constexpr (kCount > 1) _tile_zero(5);
  if constexpr (kCount > 2) _tile_zero(6);
  if constexpr (kCount > 3) _tile_zero(7);
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t* lo = b + (g & 1) * 2 * 16 * 32;
    const uint8_t* run = codes + g * kPackGroupBytes;
    PrefetchForDecode(run + kAhead, scales + (g + kAhead / kPackGroupBytes) / per_block * kPackRows);
    const __m512 sv = _mm512_loadu_ps(scales + g / per_block * kPackRows);
    DecodeGroup(run, table, PairScales<false>(sv), PairScales<true>(sv), lo, lo + 16 * 32);
    CompilerSeesTileLoads();
    _tile_loadd(2, lo, kRow);
    _tile_loadd(3, lo + 16 * 32, kRow);
    const uint16_t* ag = a + i0 * step + g * rows * kPackCols;
    HalfProducts<kCount, 0>(ag, step);
    HalfProducts<kCount, 1>(ag + half, step);
  }
  _tile_stored(4, sums + 256 * i0, kRow);
  if constexpr (kCount > 1) _tile_stored(5, sums + 256 * (i0 + 1), kRow);
  if constexpr (kCount > 2) _tile_stored(6, sums + 256 * (i0 + 2), kRow);
  if constexpr (kCount > 3) _tile_stored(7, sums + 256 * (i0 + 3), kRow);
}

// Two tiles of W, t and t + 1: group g's four B tiles (t's first and second 32 columns, then t + 1's) made into
// dst.
struct TilePair {
  const uint8_t* codes0;
  const uint8_t* codes1;
  const float* scales0;
  const float* scales1;
  int64_t per_block;
  __m512 table;

  BNB_TARGET_AMX void Decode(int64_t g, uint16_t* dst) const {
    const uint8_t* run0 = codes0 + g * kPackGroupBytes;
    const uint8_t* run1 = codes1 + g * kPackGroupBytes;
    const int64_t ahead = g + kAmxChunk;  // the next chunk's group in this slot
    PrefetchForDecode(codes0 + ahead * kPackGroupBytes, scales0 + ahead / per_block * kPackRows);
    PrefetchForDecode(codes1 + ahead * kPackGroupBytes, scales1 + ahead / per_block * kPackRows);
    const __m512 s0 = _mm512_loadu_ps(scales0 + g / per_block * kPackRows);
    const __m512 s1 = _mm512_loadu_ps(scales1 + g / per_block * kPackRows);
    DecodeGroup(run0, table, PairScales<false>(s0), PairScales<true>(s0), dst, dst + 16 * 32);
    DecodeGroup(run1, table, PairScales<false>(s1), PairScales<true>(s1), dst + 2 * 16 * 32, dst + 3 * 16 * 32);
  }
};

// kRowTiles (1-2) row tiles of A from row tile i0 against a tile pair over groups [g0, g1): C tiles 4 + i (tile t)
// and 6 + i (tile t + 1), so each A and B tile loaded feeds two products. Sums start at zero (g0 == 0) or from
// sums0 / sums1 (row tile i's rows at + 256 i) and go back there. Group g's B tiles: at b + (g - g0) *
// kAmxGroupValues, made there first where decode is set (a chunk's first pass), else left there by it.
template <int kRowTiles>
BNB_TARGET_AMX void PairPass(const uint16_t* a, int64_t step, int64_t rows, int64_t i0, int64_t g0, int64_t g1,
                             bool decode, uint16_t* b, const TilePair& w, float* sums0, float* sums1) {
  const int64_t half = rows * kPackCols / 2;
  if (g0 == 0) {
    _tile_zero(4);
    _tile_zero(6);
    if constexpr (kRowTiles > 1) {
      _tile_zero(5);
      _tile_zero(7);
    }
  } else {
    _tile_loadd(4, sums0 + 256 * i0, kRow);
    _tile_loadd(6, sums1 + 256 * i0, kRow);
    if constexpr (kRowTiles > 1) {
      _tile_loadd(5, sums0 + 256 * (i0 + 1), kRow);
      _tile_loadd(7, sums1 + 256 * (i0 + 1), kRow);
    }
  }
  for (int64_t g = g0; g < g1; ++g) {
    uint16_t* b0 = b + (g - g0) * kAmxGroupValues;
    const uint16_t* b1 = b0 + 2 * 16 * 32;
    if (decode) w.Decode(g, b0);
    CompilerSeesTileLoads();
    const uint16_t* ag = a + i0 * step + g * rows * kPackCols;
    for (int64_t h = 0; h < 2; ++h) {
      _tile_loadd(0, ag + h * half, kRow);
      _tile_loadd(2, b0 + h * 16 * 32, kRow);
      _tile_dpbf16ps(4, 0, 2);
      _tile_loadd(3, b1 + h * 16 * 32, kRow);
      _tile_dpbf16ps(6, 0, 3);
      if constexpr (kRowTiles > 1) {
        _tile_loadd(1, ag + step + h * half, kRow);
        _tile_dpbf16ps(5, 1, 2);
        _tile_dpbf16ps(7, 1, 3);
      }
    }
  }
  _tile_stored(4, sums0 + 256 * i0, kRow);
  _tile_stored(6, sums1 + 256 * i0, kRow);
  if constexpr (kRowTiles > 1) {
    _tile_stored(5, sums0 + 256 * (i0 + 1), kRow);
    _tile_stored(7, sums1 + 256 * (i0 + 1), kRow);
  }
  CompilerSeesTileLoads();  // the chunk's next pass loads what these stored
}

}  // namespace

void AmxArrange(const uint16_t* A, int64_t M, int64_t K, uint16_t* a) {
  constexpr int64_t kHalf = kPackCols / 2;
  const int64_t rows = AmxTileRows(M), groups = K / kPackCols;
  for (int64_t r = 0; r < AmxRowTiles(M) * rows; ++r) {  // rows past M: zero
    uint16_t* tile = a + r / rows * groups * rows * kPackCols + r % rows * kHalf;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t h = 0; h < 2; ++h) {
        uint16_t* half = tile + g * rows * kPackCols + h * rows * kHalf;
        if (r < M) {
          std::memcpy(half, A + r * K + g * kPackCols + h * kHalf, kHalf * sizeof(uint16_t));
        } else {
          std::memset(half, 0, kHalf * sizeof(uint16_t));
        }
      }
    }
  }
}

bool HasAmxBf16() {
  static const bool has = AskForTiles();
  return has;
}

AmxTiles::AmxTiles(int64_t rows) { ConfigureTilesFor(rows); }
AmxTiles::~AmxTiles() { ReleaseTiles(); }

BNB_TARGET_AMX void TileBf16Amx(const uint16_t* a, int64_t M, const Packed4& w, const float* code16, int64_t t,
                                uint16_t* b, float* sums) {
  const __m512 table = _mm512_loadu_ps(code16);
  const int64_t K = w.K, groups = K / kPackCols, per_block = w.blocksize / kPackCols;
  const uint8_t* codes = w.codes + t * groups * kPackGroupBytes;
  const float* scales = w.scales + t * (K / w.blocksize) * kPackRows;
  const int64_t rows = AmxTileRows(M), tiles = AmxRowTiles(M), step = groups * rows * kPackCols;
  CompilerSeesTileLoads();
  for (int64_t i0 = 0; i0 < tiles; i0 += 4) {
    switch (std::min<int64_t>(4, tiles - i0)) {
      case 1: Pass<1>(a, step, rows, i0, groups, b, codes, scales, per_block, table, sums); break;
      case 2: Pass<2>(a, step, rows, i0, groups, b, codes, scales, per_block, table, sums); break;
      case 3: Pass<3>(a, step, rows, i0, groups, b, codes, scales, per_block, table, sums); break;
      default: Pass<4>(a, step, rows, i0, groups, b, codes, scales, per_block, table, sums); break;
    }
  }
}

BNB_TARGET_AMX void TilePairBf16Amx(const uint16_t* a, int64_t M, const Packed4& w, const float* code16, int64_t t,
                                    int64_t g_begin, int64_t g_end, uint16_t* b, float* sums0, float* sums1) {
  const int64_t K = w.K, groups = K / kPackCols, blocks = K / w.blocksize;
  const uint8_t* codes0 = w.codes + t * groups * kPackGroupBytes;
  const float* scales0 = w.scales + t * blocks * kPackRows;
  const TilePair pair{codes0, codes0 + groups * kPackGroupBytes, scales0, scales0 + blocks * kPackRows,
                      w.blocksize / kPackCols, _mm512_loadu_ps(code16)};
  const int64_t rows = AmxTileRows(M), tiles = AmxRowTiles(M), step = groups * rows * kPackCols;
  CompilerSeesTileLoads();
  for (int64_t g0 = g_begin; g0 < g_end; g0 += kAmxChunk) {
    const int64_t g1 = std::min(g_end, g0 + kAmxChunk);
    for (int64_t i0 = 0; i0 < tiles; i0 += 2) {
      if (tiles - i0 >= 2) {
        PairPass<2>(a, step, rows, i0, g0, g1, i0 == 0, b, pair, sums0, sums1);
      } else {
        PairPass<1>(a, step, rows, i0, g0, g1, i0 == 0, b, pair, sums0, sums1);
      }
    }
  }
}

}  // namespace bnb::core::packed4_x86

#endif  // BNB_GEMV4_X86
