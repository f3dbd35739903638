// The AVX-512 kernels of the packed 4-bit product (gemm4_packed_x86.h), compiled with target attributes as
// gemv4_x86.cc's (which says why).
//
// A run of 32 bytes (16 rows x a column pair, gemm4_packed.h) widened to 16-bit lanes is looked up by one vpermw
// into the 16 code values (as bfloat16, the table twice: vpermw reads 5 index bits, and a byte's bit 4 is its high
// nibble's lowest); shifted right by 4, the high nibbles give the pair 32 columns on. Widened to 32-bit lanes, half a
// run (8 rows) is looked up by vpermps, which reads 4 index bits. A pair of A's columns is one 32-bit broadcast
// (bfloat16) or one 64-bit broadcast (float32): one row of A is read as it is, several rows arranged by group
// (Gemm4Packed) so a group's rows are one contiguous run.
#include "bnb/core/gemm4_packed_x86.h"

#if BNB_GEMV4_X86

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "bnb/core/dtype.h"

#define BNB_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
#define BNB_TARGET_AVX512BF16 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace bnb::core::packed4_x86 {
namespace {

// Non-temporal prefetch this far ahead in the codes, which one call reads once, as one stream.
constexpr int64_t kAhead = 2048;

inline void PrefetchGroup(const uint8_t* run) {
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(run + kAhead + 64 * l), _MM_HINT_NTA);
}

// Tile t of w: its codes and block scales, and the counts of its groups, groups per block and blocks.
struct TileOf {
  int64_t groups, per_block, blocks;
  const uint8_t* codes;
  const float* scales;

  TileOf(const Packed4& w, int64_t t)
      : groups(w.K / kPackCols),
        per_block(w.blocksize / kPackCols),
        blocks(w.K / w.blocksize),
        codes(w.codes + t * groups * kPackGroupBytes),
        scales(w.scales + t * blocks * kPackRows) {}
};

// A's column pair at p: two bfloat16 (one 32-bit lane, broadcast) or two float32 (one 64-bit lane, broadcast).
BNB_TARGET_AVX512BF16 inline __m512bh PairBf16(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(v));
}
BNB_TARGET_AVX512 inline __m512 PairF32(const float* p) {
  double v;
  std::memcpy(&v, p, 8);
  return _mm512_castpd_ps(_mm512_set1_pd(v));
}

// The bfloat16 code values of 32 index lanes (the table twice: vpermw reads 5 bits).
BNB_TARGET_AVX512BF16 inline __m512bh Codes(__m512i idx, __m512i table) {
  return reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(idx, table));
}

// 8 rows' pairs of a half run (lanes 2j + e: row j, column e of the pair): the low nibbles' codes, and with
// shift 4 the high nibbles'.
BNB_TARGET_AVX512 inline __m512i HalfRun(const uint8_t* half) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(half)));
}

// Each row's scale in both lanes of its pair: rows 0-7 (kHigh false) or 8-15 of a tile's 16 scales.
template <bool kHigh>
BNB_TARGET_AVX512 inline __m512 PairScales(__m512 scales) {
  const __m512i idx = kHigh ? _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8)
                            : _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  return _mm512_permutexvar_ps(idx, scales);
}

// Sums of lanes 2j and 2j + 1 of lo (rows 0-7) and hi (rows 8-15), in row order.
BNB_TARGET_AVX512 inline __m512 PairTotals(__m512 lo, __m512 hi) {
  const __m512 lo2 = _mm512_add_ps(lo, _mm512_permute_ps(lo, 0xB1));  // swap the lanes of each pair
  const __m512 hi2 = _mm512_add_ps(hi, _mm512_permute_ps(hi, 0xB1));
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  return _mm512_permutex2var_ps(lo2, even, hi2);
}

// R rows of A (arranged: the group's row r at a + r * 64) against one group of a tile (its runs at run, its block
// scales sv), added to the rows' sums (16 lanes each, in memory between groups): each run looked up once per pass
// for all R rows (the lookups share the vector pipes with vdpbf16ps: more rows per pass, fewer per product). Rows
// fewer than vdpbf16ps' latency in cycles get a second chain each.
template <int R>
BNB_TARGET_AVX512BF16 inline void RowsPass(const uint8_t* run, __m512i table, __m512 sv, const uint16_t* a,
                                           float* sums) {
  constexpr bool kTwoChains = R < 6;
  __m512 e[R], o[kTwoChains ? R : 1];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    e[r] = _mm512_setzero_ps();
    if constexpr (kTwoChains) o[r] = _mm512_setzero_ps();
  }
#pragma GCC unroll 16
  for (int p = 0; p < 16; ++p) {
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32 * p)));
    const __m512bh w0 = Codes(x, table), w1 = Codes(_mm512_srli_epi16(x, 4), table);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      e[r] = _mm512_dpbf16_ps(e[r], w0, PairBf16(a + r * kPackCols + 2 * p));
      if constexpr (kTwoChains) {
        o[r] = _mm512_dpbf16_ps(o[r], w1, PairBf16(a + r * kPackCols + 32 + 2 * p));
      } else {
        e[r] = _mm512_dpbf16_ps(e[r], w1, PairBf16(a + r * kPackCols + 32 + 2 * p));
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* s = sums + 16 * r;
    __m512 sum = e[r];
    if constexpr (kTwoChains) sum = _mm512_add_ps(sum, o[r]);
    _mm512_storeu_ps(s, _mm512_fmadd_ps(sum, sv, _mm512_loadu_ps(s)));
  }
}

// Rows [0, R) of a pass by a template argument: the rows left after whole passes of kPassRows.
constexpr int kPassRows = 16;
template <int R>
BNB_TARGET_AVX512BF16 inline void RestPass(int rows, const uint8_t* run, __m512i table, __m512 sv, const uint16_t* a,
                                           float* sums) {
  if constexpr (R > 0) {
    if (rows == R) return RowsPass<R>(run, table, sv, a, sums);
    RestPass<R - 1>(rows, run, table, sv, a, sums);
  }
}

}  // namespace

BNB_TARGET_AVX512BF16 void TileBf16One(const uint16_t* a, const Packed4& w, const uint16_t* table32, int64_t t,
                                       float* sums) {
  const __m512i table = _mm512_loadu_si512(table32);
  const TileOf tile(w, t);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < tile.blocks; ++c) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t g = c * tile.per_block; g < (c + 1) * tile.per_block; ++g) {
      const uint8_t* run = tile.codes + g * kPackGroupBytes;
      const uint16_t* ag = a + g * kPackCols;
      PrefetchGroup(run);
#pragma GCC unroll 8
      for (int p = 0; p < 16; p += 2) {
        const __m512i x0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32 * p)));
        const __m512i x1 =
            _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32 * p + 32)));
        s0 = _mm512_dpbf16_ps(s0, Codes(x0, table), PairBf16(ag + 2 * p));
        s1 = _mm512_dpbf16_ps(s1, Codes(_mm512_srli_epi16(x0, 4), table), PairBf16(ag + 32 + 2 * p));
        s2 = _mm512_dpbf16_ps(s2, Codes(x1, table), PairBf16(ag + 2 * p + 2));
        s3 = _mm512_dpbf16_ps(s3, Codes(_mm512_srli_epi16(x1, 4), table), PairBf16(ag + 34 + 2 * p));
      }
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
    acc = _mm512_fmadd_ps(sum, _mm512_loadu_ps(tile.scales + c * kPackRows), acc);
  }
  _mm512_storeu_ps(sums, acc);
}

BNB_TARGET_AVX512BF16 void TileBf16Rows(const uint16_t* a, int64_t M, const Packed4& w, const uint16_t* table32,
                                        int64_t t, float* sums) {
  const __m512i table = _mm512_loadu_si512(table32);
  const TileOf tile(w, t);
  std::memset(sums, 0, sizeof(float) * kPackRows * M);
  for (int64_t g = 0; g < tile.groups; ++g) {
    const uint8_t* run = tile.codes + g * kPackGroupBytes;
    PrefetchGroup(run);
    const __m512 sv = _mm512_loadu_ps(tile.scales + g / tile.per_block * kPackRows);
    const uint16_t* ag = a + g * M * kPackCols;
    int64_t r = 0;
    for (; r + kPassRows <= M; r += kPassRows) {
      RowsPass<kPassRows>(run, table, sv, ag + r * kPackCols, sums + r * kPackRows);
    }
    RestPass<kPassRows - 1>(static_cast<int>(M - r), run, table, sv, ag + r * kPackCols, sums + r * kPackRows);
  }
}

BNB_TARGET_AVX512 void TileF32One(const float* a, const Packed4& w, const float* code16, int64_t t, float* sums) {
  const __m512 table = _mm512_loadu_ps(code16);
  const TileOf tile(w, t);
  __m512 lo = _mm512_setzero_ps(), hi = lo;
  for (int64_t c = 0; c < tile.blocks; ++c) {
    __m512 b0 = _mm512_setzero_ps(), b1 = b0, b2 = b0, b3 = b0;
    for (int64_t g = c * tile.per_block; g < (c + 1) * tile.per_block; ++g) {
      const uint8_t* run = tile.codes + g * kPackGroupBytes;
      const float* ag = a + g * kPackCols;
      PrefetchGroup(run);
#pragma GCC unroll 4
      for (int p = 0; p < 16; ++p) {
        const __m512 pl = PairF32(ag + 2 * p), ph = PairF32(ag + 32 + 2 * p);
        const __m512i x0 = HalfRun(run + 32 * p), x1 = HalfRun(run + 32 * p + 16);
        b0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(x0, table), pl, b0);
        b1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(x1, table), pl, b1);
        b2 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x0, 4), table), ph, b2);
        b3 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x1, 4), table), ph, b3);
      }
    }
    const __m512 sv = _mm512_loadu_ps(tile.scales + c * kPackRows);
    lo = _mm512_fmadd_ps(_mm512_add_ps(b0, b2), PairScales<false>(sv), lo);
    hi = _mm512_fmadd_ps(_mm512_add_ps(b1, b3), PairScales<true>(sv), hi);
  }
  _mm512_storeu_ps(sums, PairTotals(lo, hi));
}

namespace {

// R rows of float32 A (arranged as the bfloat16 kernel's: the group's row r at a + r * 64) against one group of a
// tile: each half run looked up once per pass for all R rows; lanes (row j, column e of a pair) per half tile,
// kept between groups at pair_sums + 32 * r (rows 0-7's pairs, then 8-15's), each group's sums scaled there.
template <int R>
BNB_TARGET_AVX512 inline void F32Pass(const uint8_t* run, __m512 table, __m512 slo, __m512 shi, const float* a,
                                      float* pair_sums) {
  __m512 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) lo[r] = _mm512_setzero_ps(), hi[r] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < 16; ++p) {
    const __m512i x0 = HalfRun(run + 32 * p), x1 = HalfRun(run + 32 * p + 16);
    const __m512 w0 = _mm512_permutexvar_ps(x0, table), w1 = _mm512_permutexvar_ps(x1, table);
    const __m512 v0 = _mm512_permutexvar_ps(_mm512_srli_epi32(x0, 4), table);
    const __m512 v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(x1, 4), table);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 pl = PairF32(a + r * kPackCols + 2 * p), ph = PairF32(a + r * kPackCols + 32 + 2 * p);
      lo[r] = _mm512_fmadd_ps(w0, pl, lo[r]);
      hi[r] = _mm512_fmadd_ps(w1, pl, hi[r]);
      lo[r] = _mm512_fmadd_ps(v0, ph, lo[r]);
      hi[r] = _mm512_fmadd_ps(v1, ph, hi[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* s = pair_sums + 32 * r;
    _mm512_storeu_ps(s, _mm512_fmadd_ps(lo[r], slo, _mm512_loadu_ps(s)));
    _mm512_storeu_ps(s + 16, _mm512_fmadd_ps(hi[r], shi, _mm512_loadu_ps(s + 16)));
  }
}

constexpr int kF32PassRows = 8;
template <int R>
BNB_TARGET_AVX512 inline void F32Rest(int rows, const uint8_t* run, __m512 table, __m512 slo, __m512 shi,
                                      const float* a, float* pair_sums) {
  if constexpr (R > 0) {
    if (rows == R) return F32Pass<R>(run, table, slo, shi, a, pair_sums);
    F32Rest<R - 1>(rows, run, table, slo, shi, a, pair_sums);
  }
}

}  // namespace

BNB_TARGET_AVX512 void TileF32Rows(const float* a, int64_t M, const Packed4& w, const float* code16, int64_t t,
                                   float* sums) {
  const __m512 table = _mm512_loadu_ps(code16);
  const TileOf tile(w, t);
  float* pair_sums = sums + M * kPackRows;  // 32 lanes a row, then each row's pairs summed into sums
  std::memset(pair_sums, 0, sizeof(float) * 2 * kPackRows * M);
  for (int64_t g = 0; g < tile.groups; ++g) {
    const uint8_t* run = tile.codes + g * kPackGroupBytes;
    PrefetchGroup(run);
    const __m512 sv = _mm512_loadu_ps(tile.scales + g / tile.per_block * kPackRows);
    const __m512 slo = PairScales<false>(sv), shi = PairScales<true>(sv);
    const float* ag = a + g * M * kPackCols;
    int64_t r = 0;
    for (; r + kF32PassRows <= M; r += kF32PassRows) {
      F32Pass<kF32PassRows>(run, table, slo, shi, ag + r * kPackCols, pair_sums + 2 * r * kPackRows);
    }
    F32Rest<kF32PassRows - 1>(static_cast<int>(M - r), run, table, slo, shi, ag + r * kPackCols,
                              pair_sums + 2 * r * kPackRows);
  }
  for (int64_t r = 0; r < M; ++r) {
    const float* s = pair_sums + 2 * r * kPackRows;
    _mm512_storeu_ps(sums + r * kPackRows, PairTotals(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16)));
  }
}

void Bf16CodeTable(const float* code16, uint16_t* table32) {
  for (int i = 0; i < 32; ++i) table32[i] = FloatToBF16(code16[i % 16]);
}

}  // namespace bnb::core::packed4_x86

#endif  // BNB_GEMV4_X86
