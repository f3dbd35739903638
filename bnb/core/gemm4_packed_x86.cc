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
#include <limits>

#include "bnb/core/dtype.h"
#include "bnb/core/round16_x86.h"

#define BNB_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
#define BNB_TARGET_AVX512BF16 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define BNB_TARGET_AVX512VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace bnb::core::packed4_x86 {
namespace {

#include "bnb/core/gemm4_packed_x86-inl.h"  // PrefetchGroup, PairScales

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

// Transposes 8 x 8 16-bit words in each 128-bit lane: word p of r[j] goes to word j of r[p].
BNB_TARGET_AVX512 inline void Transpose8x8Words(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // t[0..3] hold rows 0-3, t[4..7] rows 4-7
    u[4 * i] = _mm256_unpacklo_epi32(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi32(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {  // u[i]: words 2i, 2i + 1 of rows 0-3; u[4 + i]: of rows 4-7
    r[2 * i] = _mm256_unpacklo_epi64(u[i], u[4 + i]);
    r[2 * i + 1] = _mm256_unpackhi_epi64(u[i], u[4 + i]);
  }
}

}  // namespace

// How far ahead of its group PackTileCodes prefetches each row: 8 groups, 256 bytes (4 and 16 measured alike).
constexpr int64_t kPackAheadGroups = 8;

// Per group, row j's 32 bytes (B's byte i: column 2i high nibble, 2i + 1 low) become 16 words, word p = bytes
// a_p | b_p << 8 with a_p = (row[p] >> 4) | (row[16 + p] & 0xF0) and b_p = (row[p] & 0x0F) | (row[16 + p] << 4)
// (columns 2p + e in the low nibbles, 32 + 2p + e in the high); run p is word p of rows 0..15. Rows j and j + 8 share
// a vector (one per 128-bit lane), so after an 8 x 8 transpose per lane, vector p is run p whole.
BNB_TARGET_AVX512 void PackTileCodes(const uint8_t* B, int64_t K, int64_t t, uint8_t* codes, bool stream) {
  const int64_t groups = K / kPackCols, row_bytes = K / 2;
  const uint8_t* rows = B + t * kPackRows * row_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0F), high4 = _mm256_set1_epi8(static_cast<char>(0xF0));
  for (int64_t g = 0; g < groups; ++g) {
    __m256i first[8], second[8];  // words 0-7 and 8-15 of rows j (low lane) and j + 8 (high lane)
    // The 16 rows are 16 streams K / 2 bytes apart, too many for the hardware prefetchers to keep ahead: each row's
    // line kPackAheadGroups groups on, once a line (two groups).
    if (g % 2 == 0) {
      for (int j = 0; j < kPackRows; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(rows + j * row_bytes + (g + kPackAheadGroups) * 32), _MM_HINT_T0);
      }
    }
    for (int j = 0; j < 8; ++j) {
      const uint8_t* r0 = rows + j * row_bytes + g * 32;
      const uint8_t* r1 = r0 + 8 * row_bytes;
      const __m256i lo =
          _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(r1), reinterpret_cast<const __m128i*>(r0));
      const __m256i hi = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(r1 + 16),
                                             reinterpret_cast<const __m128i*>(r0 + 16));
      const __m256i a = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), low4), _mm256_and_si256(hi, high4));
      const __m256i b = _mm256_or_si256(_mm256_and_si256(lo, low4), _mm256_and_si256(_mm256_slli_epi16(hi, 4), high4));
      first[j] = _mm256_unpacklo_epi8(a, b);
      second[j] = _mm256_unpackhi_epi8(a, b);
    }
    Transpose8x8Words(first);
    Transpose8x8Words(second);
    uint8_t* group = codes + (t * groups + g) * kPackGroupBytes;
    if (stream) {  // whole 512-byte groups from a 64-byte aligned start: every line written whole
      for (int p = 0; p < 8; ++p) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(group + 32 * p), first[p]);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(group + 32 * (8 + p)), second[p]);
      }
    } else {
      for (int p = 0; p < 8; ++p) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(group + 32 * p), first[p]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(group + 32 * (8 + p)), second[p]);
      }
    }
  }
  if (stream) _mm_sfence();  // the streamed lines ordered before whatever the caller writes or signals next
}

// How far ahead of its group UnpackTileCodes fetches each row's line: 4 groups, 128 bytes (8 and 16 measured alike
// or slower).
constexpr int64_t kUnpackAheadGroups = 4;

// PackTileCodes backwards: the transposes give each row's words back (the 8 x 8 transpose is its own inverse),
// packus splits them into the a and b bytes, and row[p] = (a_p << 4) | (b_p & 0x0F), row[16 + p] = (a_p & 0xF0) |
// (b_p >> 4).
BNB_TARGET_AVX512 void UnpackTileCodes(const uint8_t* codes, int64_t K, int64_t t, uint8_t* rows) {
  const int64_t groups = K / kPackCols, row_bytes = K / 2;
  const __m256i low4 = _mm256_set1_epi8(0x0F), high4 = _mm256_set1_epi8(static_cast<char>(0xF0));
  const __m256i low8 = _mm256_set1_epi16(0x00FF);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = codes + (t * groups + g) * kPackGroupBytes;
    __m256i first[8], second[8];  // runs 0-7 and 8-15; after the transposes, rows j and j + 8 (words 0-7, 8-15)
    // The writes go to 16 rows K / 2 bytes apart, each line filled over two groups: its line kUnpackAheadGroups
    // groups on fetched into L2 beforehand, once a line (prefetchw measured the same here).
    if (g % 2 == 0) {
      for (int j = 0; j < kPackRows; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(rows + j * row_bytes + (g + kUnpackAheadGroups) * 32), _MM_HINT_T1);
      }
    }
    for (int p = 0; p < 8; ++p) {
      first[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32 * p));
      second[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32 * (8 + p)));
    }
    Transpose8x8Words(first);
    Transpose8x8Words(second);
    for (int j = 0; j < 8; ++j) {
      const __m256i a = _mm256_packus_epi16(_mm256_and_si256(first[j], low8), _mm256_and_si256(second[j], low8));
      const __m256i b = _mm256_packus_epi16(_mm256_srli_epi16(first[j], 8), _mm256_srli_epi16(second[j], 8));
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(a, 4), high4), _mm256_and_si256(b, low4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(a, high4), _mm256_and_si256(_mm256_srli_epi16(b, 4), low4));
      uint8_t* r0 = rows + j * row_bytes + g * 32;
      uint8_t* r1 = r0 + 8 * row_bytes;
      _mm256_storeu2_m128i(reinterpret_cast<__m128i*>(r1), reinterpret_cast<__m128i*>(r0), lo);
      _mm256_storeu2_m128i(reinterpret_cast<__m128i*>(r1 + 16), reinterpret_cast<__m128i*>(r0 + 16), hi);
    }
  }
}

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

namespace {

// R rows of int8 activations (group g's rows at q, step, offset) against one group of a tile (its runs at run, its
// block scales sv), added to the rows' sums. A run widened to 32-bit lanes holds row j's bytes b(2j), b(2j + 1) in
// lane j; moving its nibbles 1 and 3 up 12 bits and masking puts the lane's four codes in the activations' column
// order (2p, 2p + 1, 32 + 2p, 33 + 2p), which one vpshufb turns into biased int8 values. Rows fewer than vpdpbusd's
// latency get a second chain each.
template <int R>
BNB_TARGET_AVX512VNNI inline void Int8Pass(const uint8_t* run, __m512i table, __m512 sv, const int8_t* q,
                                           const float* step, const int32_t* offset, float* sums) {
  constexpr bool kTwoChains = R < 6;
  const __m512i nibbles = _mm512_set1_epi32(0x0F0F0F0F);
  __m512i e[R], o[kTwoChains ? R : 1];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    e[r] = _mm512_set1_epi32(offset[r]);
    if constexpr (kTwoChains) o[r] = _mm512_setzero_si512();
  }
#pragma GCC unroll 16
  for (int p = 0; p < 16; ++p) {
    const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32 * p)));
    const __m512i lanes = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(x, 12), nibbles, 0xA8);  // (x | y) & m
    const __m512i values = _mm512_shuffle_epi8(table, lanes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, q + r * kPackCols + 4 * p, 4);
      if (kTwoChains && p % 2 == 1) {
        o[r] = _mm512_dpbusd_epi32(o[r], values, _mm512_set1_epi32(four));
      } else {
        e[r] = _mm512_dpbusd_epi32(e[r], values, _mm512_set1_epi32(four));
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    __m512i dot = e[r];
    if constexpr (kTwoChains) dot = _mm512_add_epi32(dot, o[r]);
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(step[r]), sv);
    float* s = sums + 16 * r;
    _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale)));
  }
}

template <int R>
BNB_TARGET_AVX512VNNI inline void Int8Rest(int rows, const uint8_t* run, __m512i table, __m512 sv, const int8_t* q,
                                           const float* step, const int32_t* offset, float* sums) {
  if constexpr (R > 0) {
    if (rows == R) return Int8Pass<R>(run, table, sv, q, step, offset, sums);
    Int8Rest<R - 1>(rows, run, table, sv, q, step, offset, sums);
  }
}

}  // namespace

BNB_TARGET_AVX512 void QuantizeInt8(DType dtype, const void* A, Int8Activations& a) {
  const int64_t M = a.M, K = a.K, groups = K / kPackCols;
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      __m512 v[4], top = _mm512_setzero_ps();
      __mmask16 bad = 0;
      for (int c = 0; c < 4; ++c) {
        v[c] = Load16AsF32(dtype, A, r * K + g * kPackCols + 16 * c);
        bad |= _mm512_cmp_ps_mask(_mm512_sub_ps(v[c], v[c]), v[c], _CMP_UNORD_Q);  // x - x: NaN where x is not finite
        top = _mm512_max_ps(top, _mm512_and_ps(v[c], magnitude));
      }
      const int64_t at = g * M + r;
      int8_t* q = a.q.data() + at * kPackCols;
      const float amax = bad != 0 ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(top);
      const float sa = amax / 127.0f;
      a.step[at] = amax / (127.0f * 127.0f);
      if (!(sa > 0.0f)) {  // zeros (or too small for a float32 scale), or not finite
        std::memset(q, 0, kPackCols);
        a.offset[at] = 0;
        continue;
      }
      const __m512 divisor = _mm512_set1_ps(sa), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
      __m512i n[4];
      __m128i b[4];
      for (int c = 0; c < 4; ++c) {
        const __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(v[c], divisor), lo), hi);
        n[c] = _mm512_cvt_roundps_epi32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        b[c] = _mm512_cvtepi32_epi8(n[c]);  // columns 16c .. 16c + 15
      }
      // Lane p: the 16-bit words p of columns 0-31 and of columns 32-63.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm_unpacklo_epi16(b[0], b[2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm_unpackhi_epi16(b[0], b[2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32), _mm_unpacklo_epi16(b[1], b[3]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 48), _mm_unpackhi_epi16(b[1], b[3]));
      const __m512i total = _mm512_add_epi32(_mm512_add_epi32(n[0], n[1]), _mm512_add_epi32(n[2], n[3]));
      a.offset[at] = -128 * _mm512_reduce_add_epi32(total);
    }
  }
}

BNB_TARGET_AVX512VNNI void TileInt8Rows(const Int8Activations& a, int64_t r0, int64_t rows, const Packed4& w,
                                        const uint8_t* table64, int64_t t, float* sums) {
  const __m512i table = _mm512_loadu_si512(table64);
  const TileOf tile(w, t);
  std::memset(sums, 0, sizeof(float) * kPackRows * rows);
  for (int64_t g = 0; g < tile.groups; ++g) {
    const uint8_t* run = tile.codes + g * kPackGroupBytes;
    PrefetchGroup(run);
    const __m512 sv = _mm512_loadu_ps(tile.scales + g / tile.per_block * kPackRows);
    const int64_t base = g * a.M + r0;
    int64_t r = 0;
    for (; r + kPassRows <= rows; r += kPassRows) {
      Int8Pass<kPassRows>(run, table, sv, a.q.data() + (base + r) * kPackCols, a.step.data() + base + r,
                          a.offset.data() + base + r, sums + r * kPackRows);
    }
    Int8Rest<kPassRows - 1>(static_cast<int>(rows - r), run, table, sv, a.q.data() + (base + r) * kPackCols,
                            a.step.data() + base + r, a.offset.data() + base + r, sums + r * kPackRows);
  }
}

BNB_TARGET_AVX512 void StoreTileRows(DType dtype, const float* sums, int64_t sums_ld, int64_t rows, const float* add,
                                     void* out, int64_t ld) {
  const __m512 bias = add == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(add);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 v = _mm512_loadu_ps(sums + r * sums_ld);
    if (add != nullptr) v = _mm512_add_ps(v, bias);  // no bias, no addition: -0 stays -0
    if (dtype == DType::kFloat32) {
      _mm512_storeu_ps(static_cast<float*>(out) + r * ld, v);
      continue;
    }
    __m512i half;
    if (dtype == DType::kBFloat16) {
      half = round16_x86::Round16<DType::kBFloat16>(v);  // FloatToBF16's rule
    } else {  // vcvtps2ph keeps a NaN's payload bits; FloatToHalf makes every NaN its sign and 0x7E00
      const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000));
      half = _mm512_mask_or_epi32(round16_x86::Round16<DType::kFloat16>(v), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                                  sign, _mm512_set1_epi32(0x7E00));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + r * ld), _mm512_cvtepi32_epi16(half));
  }
}

void Bf16CodeTable(const float* code16, uint16_t* table32) {
  for (int i = 0; i < 32; ++i) table32[i] = FloatToBF16(code16[i % 16]);
}

}  // namespace bnb::core::packed4_x86

#endif  // BNB_GEMV4_X86
