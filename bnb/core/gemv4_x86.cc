// The AVX-512 kernels of the 4-bit matrix-vector product (gemv4_x86.h).
//
// Dispatch: functions compiled with __attribute__((target(...))) (as int8_gemm_x86.cc, which says why not Highway's
// AVX3_DL/AVX3_ZEN4 targets), chosen per call by Gemv4 (gemv4_hwy.cc) from the instruction set Highway dispatches to
// under the cpu.isa cap and CPUID.
//
// Both kernels read a row in chunks of 128 weights (64 bytes, one zmm load) and look the code values up with one
// full-width permute per 16 (vpermps) or 32 (vpermw) weights, indexed by the packed bytes shifted right: a permute
// reads only the low 4 (vpermps) or 5 (vpermw) bits of each index lane, so no masking is needed, and the 16-entry
// table (duplicated to 32 for vpermw) sits in one register. Lanes then hold weights out of element order; A is laid
// out beforehand in that order. In both kernels float32 lane i of a chunk's sums covers the chunk's weights
// 8i .. 8i + 7, so blocks of 32 and 64 weights are four and two groups of lanes, scaled by one multiply per chunk,
// and larger blocks are summed unscaled over their chunks and scaled once.
//
// Why these and not byte shuffles within 128-bit blocks (the Highway kernel's fast path): on Zen 4 a zmm vpermps or
// vpermw issues at one per cycle like vpshufb, so the cross-lane lookup costs nothing extra and saves the interleaves
// (tools/bench/NOTES.md, '4-bit gemv on AVX-512').
#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemv4_x86.h"
#include "bnb/core/lookup256_x86.h"

#if BNB_GEMV4_X86

// GCC 12 warns that intrinsics it implements over _mm512_undefined_* (vpermps, shifts, the lane sums) use an
// uninitialized value, inside its own headers: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#define BNB_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))
#define BNB_TARGET_AVX512BF16 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace bnb::core::gemv4_x86 {
namespace {

// The element of a chunk that lane k of the lookup with index shift 4 * s holds, minus 8k (float32 kernel: dword k
// holds bytes 4k .. 4k + 3, whose low nibble is the odd element) or minus 4k (bfloat16 kernel: word k, bytes
// 2k, 2k + 1).
constexpr int kOrder8[8] = {1, 0, 3, 2, 5, 4, 7, 6};
constexpr int kOrder4[4] = {1, 0, 3, 2};

// The scale of each float32 lane of a chunk starting at flat element f, for blocks of 32 (block_shift 5) or 64
// (block_shift 6) weights: lane i covers weights 8i .. 8i + 7, in block (f + 8i) >> block_shift.
BNB_TARGET_AVX512 inline __m512 LaneScales(const float* absmax, int64_t f, int block_shift) {
  const int64_t first = f >> block_shift;
  if (block_shift == 5) {
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(_mm_loadu_ps(absmax + first)));
  }
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(absmax + first)));
  return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(two));
}

// How far ahead of the chunk it reads a row prefetches its bytes. Hardware prefetch alone left a DRAM-bound gemv at
// ~60% of a copy's bandwidth; for one token 256-2048 bytes ahead measured alike, for small batches, which read a
// row a slice at a time, 2048 beat 512 by 6-11% (tools/bench/NOTES.md, '4-bit gemv on AVX-512' and 'Small batches:
// dequantized bfloat16 tables'). Non-temporal (NTA): a call reads each weight byte once; on weights not in cache
// one and two rows ran 15-20% faster than with T0 on Zen 4, cached weights alike ('Small batches: scale prefetch,
// NTA'). On Intel's Sapphire/Emerald Rapids NTA (into L1 only) left one core's stream short of requests in flight:
// there into L2 (T1), one token 1.15-1.3x faster ('Prefetch into L2 on Sapphire Rapids').
constexpr int64_t kPrefetchBytes = 2048;

// Read once at load (a function-local static would test its guard on every chunk).
const bool kPrefetchIntoL2 = CpuIsIntel();

inline void PrefetchCodes(const uint8_t* p) {
  if (kPrefetchIntoL2) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_NTA);
  }
}

// With a chunk's bytes, the block scales kPrefetchBytes of codes ahead (2 * kPrefetchBytes elements): a weight that
// is not cached has cold scales too (blocks of 64: 1/16 of its bytes), which were the kernels' largest stall.
inline void PrefetchScales(const float* absmax, int64_t f, int block_shift) {
  _mm_prefetch(reinterpret_cast<const char*>(absmax + ((f + 2 * kPrefetchBytes) >> block_shift)), _MM_HINT_T0);
}

// A row's sum over its chunks, for a Chunk functor that adds a chunk's unscaled code-times-A sums to two
// accumulators: Chunk(row bytes of the chunk, chunk index, p, q). Defined once per target attribute (a function
// inlines only into one compiled for at least its instruction sets, and the bfloat16 chunk needs AVX512-BF16).
#define BNB_ROW_STEP(c)                                                                                       \
  {                                                                                                                  \
    PrefetchCodes(row_bytes + (c) * (kChunk / 2) + kPrefetchBytes);                                                  \
    PrefetchScales(absmax, row_first + (c) * kChunk, block_shift);                                                   \
    chunk(row_bytes + (c) * (kChunk / 2), c, p, q);                                                                  \
  }
#define BNB_DEFINE_ROW_SUM(NAME, TARGET)                                                                              \
  template <class Chunk>                                                                                             \
  TARGET inline float NAME(const Chunk& chunk, const uint8_t* row_bytes, const float* absmax, int64_t row_first,    \
                           int64_t chunks, int block_shift) {                                                        \
    __m512 total = _mm512_setzero_ps();                                                                              \
    if (block_shift <= 6) {                                                                                          \
      for (int64_t c = 0; c < chunks; ++c) {                                                                         \
        __m512 p = _mm512_setzero_ps(), q = _mm512_setzero_ps();                                                     \
        BNB_ROW_STEP(c)                                                                                              \
        const __m512 scales = LaneScales(absmax, row_first + c * kChunk, block_shift);                               \
        total = _mm512_fmadd_ps(_mm512_add_ps(p, q), scales, total);                                                 \
      }                                                                                                              \
    } else { /* a chunk lies in one block: blocks are multiples of 128 long, chunks start at multiples of 128 */     \
      int64_t c = 0;                                                                                                 \
      while (c < chunks) {                                                                                           \
        const int64_t block = (row_first + c * kChunk) >> block_shift;                                               \
        const int64_t block_end = (((block + 1) << block_shift) - row_first) / kChunk; /* in chunks of the row */   \
        const int64_t end = block_end < chunks ? block_end : chunks;                                                 \
        __m512 p = _mm512_setzero_ps(), q = _mm512_setzero_ps();                                                     \
        for (; c < end; ++c) BNB_ROW_STEP(c)                                                                         \
        total = _mm512_fmadd_ps(_mm512_add_ps(p, q), _mm512_set1_ps(absmax[block]), total);                          \
      }                                                                                                              \
    }                                                                                                                \
    return _mm512_reduce_add_ps(total);                                                                              \
  }

BNB_DEFINE_ROW_SUM(RowSumAvx512, BNB_TARGET_AVX512)
BNB_DEFINE_ROW_SUM(RowSumAvx512Bf16, BNB_TARGET_AVX512BF16)
#undef BNB_DEFINE_ROW_SUM
#undef BNB_ROW_STEP

struct ChunkF32 {
  __m512 table;
  const float* a;  // A in lookup order: chunk c, shift step s, lane k at a[c * 128 + 16 * s + k]

  BNB_TARGET_AVX512 inline void operator()(const uint8_t* bytes, int64_t c, __m512& p, __m512& q) const {
    const __m512i x = _mm512_loadu_si512(bytes);
    const float* ac = a + c * kChunk;
    p = _mm512_fmadd_ps(_mm512_permutexvar_ps(x, table), _mm512_loadu_ps(ac), p);
    q = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), table), _mm512_loadu_ps(ac + 16), q);
    p = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 8), table), _mm512_loadu_ps(ac + 32), p);
    q = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 12), table), _mm512_loadu_ps(ac + 48), q);
    p = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 16), table), _mm512_loadu_ps(ac + 64), p);
    q = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 20), table), _mm512_loadu_ps(ac + 80), q);
    p = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 24), table), _mm512_loadu_ps(ac + 96), p);
    q = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 28), table), _mm512_loadu_ps(ac + 112), q);
  }
};

struct ChunkBf16 {
  __m512i table;       // the 16 code values as bfloat16, twice
  const uint16_t* a;   // A in lookup order: chunk c, shift step r, lane j at a[c * 128 + 32 * r + j]

  BNB_TARGET_AVX512BF16 inline void operator()(const uint8_t* bytes, int64_t c, __m512& p, __m512& q) const {
    const __m512i x = _mm512_loadu_si512(bytes);
    const uint16_t* ac = a + c * kChunk;
    p = _mm512_dpbf16_ps(p, Codes(x), Acts(ac));
    q = _mm512_dpbf16_ps(q, Codes(_mm512_srli_epi16(x, 4)), Acts(ac + 32));
    p = _mm512_dpbf16_ps(p, Codes(_mm512_srli_epi16(x, 8)), Acts(ac + 64));
    q = _mm512_dpbf16_ps(q, Codes(_mm512_srli_epi16(x, 12)), Acts(ac + 96));
  }

  BNB_TARGET_AVX512BF16 inline __m512bh Codes(__m512i idx) const {
    return reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(idx, table));
  }
  BNB_TARGET_AVX512BF16 static inline __m512bh Acts(const uint16_t* at) {
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(at));
  }
};

// The bfloat16 kernel takes rows in groups (RowGroupBf16) where A (laid out) is larger than this, so that it
// comes from L2: one load of A for four rows. Rows of K = 4096 measured faster in pairs only warm (the same weight
// again); from memory they lost 577 -> 824 us, and four at a time worse (tools/bench/NOTES.md, 'One token, long
// rows: four rows a pass'). The float32 kernel, whose chunks hold twice the dependent multiply-adds, measured
// slower in pairs.
constexpr int64_t kGroupAboveBytes = 16 << 10;

// Small batches (SmallF32 / SmallBf16): W's row n against M <= kSmallRows rows of A, each chunk's code values
// looked up once for all of them. The M rows of A outgrow L1 (8 rows of K = 4096 in bfloat16: 64 KB), so K is
// taken in slices of kSmallSliceBytes of them over a band of kSmallBand rows of W, each (W row, A row) pair's 16
// lane totals kept between slices: without it every chunk read its A from L2 (bfloat16, batch 16, 4096x4096:
// 3.3 ms against 2.2 for F.linear). Slices of 16 KB: with the dequantized-table kernel they beat 8 KB, most for a
// few rows, whose rows of W they read in longer runs (tools/bench/NOTES.md, 'Small batches: 16 KB slices'). In
// SmallF32 a block's sum is scaled at the block's end or the slice's, whichever comes first; SmallBf16 multiplies
// values already scaled (ScaledCodes).
constexpr int64_t kSmallSliceBytes = 16 << 10;
constexpr int64_t kSmallBand = 16;

// After chunk c (first element f) of W's row, scales the M rows' chunk sums p into their totals t: every chunk for
// blocks of 32 and 64 (lanes of four or two blocks), at a block's end or the slice's (c + 1 == c1) for larger ones.
template <int M>
BNB_TARGET_AVX512 inline void ScaleInto(__m512 (&p)[M], __m512 (&t)[M], const float* absmax, int64_t f, int64_t c,
                                        int64_t c1, int block_shift) {
  if (block_shift <= 6) {
    const __m512 scales = LaneScales(absmax, f, block_shift);
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) t[r] = _mm512_fmadd_ps(p[r], scales, t[r]), p[r] = _mm512_setzero_ps();
  } else if (c + 1 == c1 || ((f + kChunk) >> block_shift) != (f >> block_shift)) {
    const __m512 scale = _mm512_set1_ps(absmax[f >> block_shift]);
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) t[r] = _mm512_fmadd_ps(p[r], scale, t[r]), p[r] = _mm512_setzero_ps();
  }
}

// Chunks [c0, c1) of W's row n against M rows of A (interleaved by chunk: PassOffset), added to the
// rows' 16-lane totals at saved.
template <int M>
struct SliceF32 {
  static constexpr int kRows = 1;
  const float* a;
  int64_t K;
  const float* code16;
  const uint8_t* B;
  const float* absmax;
  int block_shift;

  BNB_TARGET_AVX512 void operator()(int64_t n, int /*rows: 1*/, int64_t c0, int64_t c1, float* saved) const {
    const __m512 table = _mm512_loadu_ps(code16);
    const uint8_t* row = B + n * (K / 2);
    __m512 t[M], p[M];
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) t[r] = _mm512_load_ps(saved + 16 * r), p[r] = _mm512_setzero_ps();
    for (int64_t c = c0; c < c1; ++c) {
      PrefetchCodes(row + c * (kChunk / 2) + kPrefetchBytes);
      PrefetchScales(absmax, n * K + c * kChunk, block_shift);
      const __m512i x = _mm512_loadu_si512(row + c * (kChunk / 2));
      __m512 code[8];
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) code[s] = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4 * s), table);
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) {  // the products in RowsF32's order, so that rows come out as there
        const float* ac = a + (c * M + r) * kChunk;
        __m512 even = _mm512_mul_ps(code[0], _mm512_loadu_ps(ac));
        __m512 odd = _mm512_mul_ps(code[1], _mm512_loadu_ps(ac + 16));
#pragma GCC unroll 3
        for (int s = 2; s < 8; s += 2) {
          even = _mm512_fmadd_ps(code[s], _mm512_loadu_ps(ac + 16 * s), even);
          odd = _mm512_fmadd_ps(code[s + 1], _mm512_loadu_ps(ac + 16 * s + 16), odd);
        }
        p[r] = _mm512_add_ps(p[r], _mm512_add_ps(even, odd));
      }
      ScaleInto<M>(p, t, absmax, n * K + c * kChunk, c, c1, block_shift);
    }
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) _mm512_store_ps(saved + 16 * r, t[r]);
  }
};

// The bfloat16 small-batch kernel multiplies the dequantized weight rounded to bfloat16, round_bf16(code * absmax)
// (what dequantize_4bit writes in bfloat16, so the error of dequantize + F.linear), so its sums need no per-block
// scaling: a chunk's lookup table holds those values for each block the chunk spans, entry 16 * g + c for code c of
// the chunk's g-th block. Word lane k of a lookup covers the chunk's elements 4k .. 4k + 3, so blocks of 64 are
// lanes 0-15 and 16-31 (two tables of 16 in one register), blocks of 32 four groups of 8 (two registers,
// vpermi2w), and blocks of 128 or more one table (repeated: the index's bit 4 is then another code's bit).
BNB_TARGET_AVX512BF16 inline __m256i Bf16Values(__m512 code, float scale) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(code, _mm512_set1_ps(scale))));
}

BNB_TARGET_AVX512BF16 inline __m512i TwoTables(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// A row's chunk codes as dequantized bfloat16 values: code[s] = lookup of the nibbles at shift 4 * s, for kG blocks
// per chunk (1: blocks of 128 or more; 2: 64; 4: 32) from block b on.
template <int kG>
__attribute__((always_inline)) BNB_TARGET_AVX512BF16 inline void ScaledCodes(__m512i x, __m512 code16,
                                                                             const float* absmax, int64_t b,
                                                                             __m512bh (&code)[4]) {
  const __m512i nibble = _mm512_set1_epi16(0x0F);
  if constexpr (kG == 1) {
    const __m256i v = Bf16Values(code16, absmax[b]);
    const __m512i table = TwoTables(v, v);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      code[s] = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 4 * s), table));
    }
  } else if constexpr (kG == 2) {
    const __m512i table = TwoTables(Bf16Values(code16, absmax[b]), Bf16Values(code16, absmax[b + 1]));
    const __m512i group = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(0x10), 1);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {  // (x >> 4s) & 0x0F | group: ternary logic 0xEA is (a & b) | c
      const __m512i idx = _mm512_ternarylogic_epi32(_mm512_srli_epi16(x, 4 * s), nibble, group, 0xEA);
      code[s] = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(idx, table));
    }
  } else {
    const __m512i lo = TwoTables(Bf16Values(code16, absmax[b]), Bf16Values(code16, absmax[b + 1]));
    const __m512i hi = TwoTables(Bf16Values(code16, absmax[b + 2]), Bf16Values(code16, absmax[b + 3]));
    const __m512i group = _mm512_set_epi64(0x0030003000300030, 0x0030003000300030, 0x0020002000200020,
                                           0x0020002000200020, 0x0010001000100010, 0x0010001000100010, 0, 0);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m512i idx = _mm512_ternarylogic_epi32(_mm512_srli_epi16(x, 4 * s), nibble, group, 0xEA);
      code[s] = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi16(lo, idx, hi));
    }
  }
}

// Chunks [c0, c1) of W's rows n .. n + rows - 1 (rows: 1 or 2, one load of A for both) against M rows of A
// (interleaved by chunk: PassOffset), added to each (W row, A row) pair's 16-lane sums at saved (W row
// w's at saved + w * M * 16).
template <int M>
struct SliceBf16 {
  static constexpr int kRows = 2;
  const uint16_t* a;
  int64_t K;
  const float* code16;
  const uint8_t* B;
  const float* absmax;
  int block_shift;

  BNB_TARGET_AVX512BF16 void operator()(int64_t n, int rows, int64_t c0, int64_t c1, float* saved) const {
    const int g = block_shift >= 7 ? 1 : block_shift == 6 ? 2 : 4;
    if (rows == 2) {
      if (g == 1) return Run<2, 1>(n, c0, c1, saved);
      if (g == 2) return Run<2, 2>(n, c0, c1, saved);
      return Run<2, 4>(n, c0, c1, saved);
    }
    if (g == 1) return Run<1, 1>(n, c0, c1, saved);
    if (g == 2) return Run<1, 2>(n, c0, c1, saved);
    return Run<1, 4>(n, c0, c1, saved);
  }

  template <int R, int kG>
  BNB_TARGET_AVX512BF16 void Run(int64_t n, int64_t c0, int64_t c1, float* saved) const {
    const __m512 code16v = _mm512_loadu_ps(code16);
    __m512 p[R][M];
#pragma GCC unroll 2
    for (int w = 0; w < R; ++w) {
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) p[w][r] = _mm512_load_ps(saved + (w * M + r) * 16);
    }
    for (int64_t c = c0; c < c1; ++c) {
      __m512bh code[R][4];
#pragma GCC unroll 2
      for (int w = 0; w < R; ++w) {
        const uint8_t* bytes = B + (n + w) * (K / 2) + c * (kChunk / 2);
        PrefetchCodes(bytes + kPrefetchBytes);
        PrefetchScales(absmax, (n + w) * K + c * kChunk, block_shift);
        ScaledCodes<kG>(_mm512_loadu_si512(bytes), code16v, absmax, ((n + w) * K + c * kChunk) >> block_shift,
                        code[w]);
      }
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) {
        const uint16_t* ac = a + (c * M + r) * kChunk;
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
          const __m512bh act = reinterpret_cast<__m512bh>(_mm512_loadu_si512(ac + 32 * s));
#pragma GCC unroll 2
          for (int w = 0; w < R; ++w) p[w][r] = _mm512_dpbf16_ps(p[w][r], code[w][s], act);
        }
      }
    }
#pragma GCC unroll 2
    for (int w = 0; w < R; ++w) {
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) _mm512_store_ps(saved + (w * M + r) * 16, p[w][r]);
    }
  }
};

BNB_TARGET_AVX512 float Sum16(const float* v) { return _mm512_reduce_add_ps(_mm512_load_ps(v)); }

// The small-batch passes' loops: W's rows in bands of kSmallBand, K in slices whose A rows (a_bytes an element)
// stay in L1, each (W row, A row) pair's 16 lane totals kept between slices; then one lane sum per output.
// The rows' own prefetches run kPrefetchBytes ahead within a row, which a band reads a slice at a time: a band's
// first slices would find nothing fetched. So each band's last slice prefetches the first bytes of the rows read
// next, [p0, p1) (B: the packed codes, K / 2 bytes a row).
BNB_TARGET_AVX512 inline void PrefetchRowStarts(const uint8_t* B, int64_t K, int64_t p0, int64_t p1) {
  const int64_t bytes = std::min(kPrefetchBytes, K / 2);
  for (int64_t n = p0; n < p1; ++n) {
    for (int64_t off = 0; off < bytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(B + n * (K / 2) + off), _MM_HINT_T0);
    }
  }
}

// Rows [n0, n1) of W; after them come rows [p0, p1) (another pass over a band, or the next band).
template <int M, class Slice>
void SmallRows(const Slice& add_slice, int64_t K, int64_t a_bytes, float* acc, int64_t ldacc, int64_t n0,
               int64_t n1, int64_t p0, int64_t p1) {
  const int64_t chunks = K / kChunk;
  const int64_t slice = std::max<int64_t>(1, kSmallSliceBytes / (M * kChunk * a_bytes));
  alignas(64) float partial[kSmallBand * M * 16];
  for (int64_t band = n0; band < n1; band += kSmallBand) {
    const int64_t band_end = std::min(n1, band + kSmallBand);
    std::fill(partial, partial + (band_end - band) * M * 16, 0.0f);
    for (int64_t c0 = 0; c0 < chunks; c0 += slice) {
      if (c0 + slice >= chunks) {
        if (band_end < n1) {
          PrefetchRowStarts(add_slice.B, K, band_end, std::min(n1, band_end + kSmallBand));
        } else {
          PrefetchRowStarts(add_slice.B, K, p0, p1);
        }
      }
      for (int64_t n = band; n < band_end; n += Slice::kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(Slice::kRows, band_end - n));
        add_slice(n, rows, c0, std::min(chunks, c0 + slice), partial + (n - band) * M * 16);
      }
    }
    for (int64_t n = band; n < band_end; ++n) {
      for (int r = 0; r < M; ++r) acc[r * ldacc + n - n0] = Sum16(partial + ((n - band) * M + r) * 16);
    }
  }
}

// Passes of kSmallRows rows of A, then the rest, each through its instantiation.
template <class Run>
void InPasses(int64_t M, const Run& run) {
  for (int64_t r0 = 0; r0 < M; r0 += kSmallRows) {
    const int64_t rows = M - r0 < kSmallRows ? M - r0 : kSmallRows;
    switch (rows) {
      case 1: run(std::integral_constant<int, 1>(), r0); break;
      case 2: run(std::integral_constant<int, 2>(), r0); break;
      case 3: run(std::integral_constant<int, 3>(), r0); break;
      case 4: run(std::integral_constant<int, 4>(), r0); break;
      case 5: run(std::integral_constant<int, 5>(), r0); break;
      case 6: run(std::integral_constant<int, 6>(), r0); break;
      case 7: run(std::integral_constant<int, 7>(), r0); break;
      default: run(std::integral_constant<int, 8>(), r0); break;
    }
  }
}
static_assert(kSmallRows == 8, "InPasses instantiates 1 .. 8 rows");

// W's rows [n0, n1) in bands of kSmallBand, each band through every pass of A's rows before the next: the band's
// codes (16 rows of K / 2 bytes) then come from L2 for the passes after the first, where passes over all of W
// read it from memory once per pass (batch 16 in bfloat16 read it twice). run(rows, r0, b0, b1).
template <class Run>
void InBands(int64_t M, int64_t n0, int64_t n1, const Run& run) {
  for (int64_t b0 = n0; b0 < n1; b0 += kSmallBand) {
    const int64_t b1 = std::min(n1, b0 + kSmallBand);
    InPasses(M, [&](auto rows, int64_t r0) {
      const bool last_pass = r0 + decltype(rows)::value >= M;
      // The rows read next: this band again, or the next band.
      run(rows, r0, b0, b1, last_pass ? b1 : b0, last_pass ? std::min(n1, b1 + kSmallBand) : b1);
    });
  }
}

}  // namespace

void SmallF32(const float* a, int64_t M, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
              int block_shift, float* acc, int64_t ldacc, int64_t n0, int64_t n1) {
  InBands(M, n0, n1, [&](auto rows, int64_t r0, int64_t b0, int64_t b1, int64_t p0, int64_t p1) {
    constexpr int M = decltype(rows)::value;
    SmallRows<M>(SliceF32<M>{a + r0 * K, K, code16, B, absmax, block_shift}, K, sizeof(float),
                 acc + r0 * ldacc + (b0 - n0), ldacc, b0, b1, p0, p1);
  });
}

void SmallBf16(const uint16_t* a, int64_t M, const uint8_t* B, const float* absmax, const float* code16,
               int64_t K, int block_shift, float* acc, int64_t ldacc, int64_t n0, int64_t n1) {
  InBands(M, n0, n1, [&](auto rows, int64_t r0, int64_t b0, int64_t b1, int64_t p0, int64_t p1) {
    constexpr int M = decltype(rows)::value;
    SmallRows<M>(SliceBf16<M>{a + r0 * K, K, code16, B, absmax, block_shift}, K, sizeof(uint16_t),
                 acc + r0 * ldacc + (b0 - n0), ldacc, b0, b1, p0, p1);
  });
}

bool HasAvx512Bw() {
  static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}

bool HasAvx512Bf16() {
  static const bool has = HasAvx512Bw() && __builtin_cpu_supports("avx512bf16");
  return has;
}

bool HasAvx512Fp16() {
  static const bool has = HasAvx512Bw() && __builtin_cpu_supports("avx512fp16");
  return has;
}

namespace {

constexpr int64_t kNested = 256;  // NestedAbsmax's blocks of q per absmax2 value

// The scale of 16 blocks from b: absmax2 of each, two values where they cross into the next absmax2 block.
BNB_TARGET_AVX512 inline __m512 NestedScale16(const float* absmax2, int64_t b) {
  const int64_t j = b / kNested;
  const __m512 scale = _mm512_set1_ps(absmax2[j]);
  if ((b + 15) / kNested == j) return scale;
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __mmask16 next = _mm512_cmpge_epi32_mask(lanes, _mm512_set1_epi32(static_cast<int32_t>((j + 1) * kNested - b)));
  return _mm512_mask_blend_ps(next, scale, _mm512_set1_ps(absmax2[j + 1]));
}

BNB_TARGET_AVX512VBMI void ExpandNestedVbmi(const uint8_t* q, const float* code256, const float* absmax2,
                                           float offset, int64_t b0, int64_t b1, float* out, int64_t* done) {
  const lookup256_x86::Lookup256 lookup(code256);
  const __m512 off = _mm512_set1_ps(offset);
  int64_t b = b0;
  for (; b + 64 <= b1; b += 64) {
    __m512 code[4];
    lookup.Get(q + b, code);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512 scaled = _mm512_mul_ps(code[k], NestedScale16(absmax2, b + 16 * k));
      _mm512_storeu_ps(out + (b - b0) + 16 * k, _mm512_add_ps(scaled, off));
    }
  }
  *done = b;
}

}  // namespace

BNB_TARGET_AVX512 void ExpandNested(const uint8_t* q, const float* code256, const float* absmax2, float offset,
                                    int64_t b0, int64_t b1, float* out) {
  const __m512 off = _mm512_set1_ps(offset);
  int64_t b = b0;
  if (lookup256_x86::HasVbmi()) ExpandNestedVbmi(q, code256, absmax2, offset, b0, b1, out, &b);
  for (; b + 16 <= b1; b += 16) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b)));
    const __m512 code = _mm512_i32gather_ps(idx, code256, 4);
    _mm512_storeu_ps(out + (b - b0), _mm512_add_ps(_mm512_mul_ps(code, NestedScale16(absmax2, b)), off));
  }
  for (; b < b1; ++b) {
    const float scaled = code256[q[b]] * absmax2[b / kNested];
    out[b - b0] = scaled + offset;
  }
}

std::vector<float> ArrangeF32(DType dtype, const void* A, int64_t K) {
  std::vector<float> a(K);
  for (int64_t c = 0; c < K; c += kChunk) {
    for (int s = 0; s < 8; ++s) {
      for (int k = 0; k < 16; ++k) a[c + 16 * s + k] = LoadAsFloat(dtype, A, c + 8 * k + kOrder8[s]);
    }
  }
  return a;
}

std::vector<uint16_t> ArrangeBf16(const void* A, int64_t K) {
  std::vector<uint16_t> a(K);
  for (int64_t c = 0; c < K; c += kChunk) {
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < 32; ++j) a[c + 32 * r + j] = LoadElement<uint16_t>(A, c + 4 * j + kOrder4[r]);
    }
  }
  return a;
}

// Rows are read whole: cutting K into slices whose A stays in L1 (over bands of 4-64 rows) measured 10-60% slower
// for K = 14336, where A does not fit L1: the weights' short strided runs cost more than A from L2
// (tools/bench/NOTES.md, '4-bit gemv on AVX-512').
BNB_TARGET_AVX512 void RowsF32(const float* a, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
                               int block_shift, float* acc, int64_t row_begin, int64_t row_end) {
  const ChunkF32 chunk{_mm512_loadu_ps(code16), a};
  for (int64_t m = row_begin; m < row_end; ++m) {
    acc[m - row_begin] = RowSumAvx512(chunk, B + m * (K / 2), absmax, m * K, K / kChunk, block_shift);
  }
}

// R rows of W in one pass over K, each load of A serving all of them, each chunk's sums scaled at once (blocks of 32
// or 64: lane scales; larger ones: the chunk's block). Rows whose A outgrows L1 (kGroupAboveBytes) take A from L2,
// once per R rows; four at a time measured 12% faster than two on weights not in cache (tools/bench/NOTES.md, 'One
// token, long rows: four rows a pass').
template <int R>
BNB_TARGET_AVX512BF16 void RowGroupBf16(__m512i table, const uint16_t* a, const uint8_t* B, const float* absmax,
                                        int64_t K, int block_shift, int64_t m, float* acc) {
  const int64_t chunks = K / kChunk;
  __m512 t[R];
#pragma GCC unroll 8
  for (int w = 0; w < R; ++w) t[w] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const uint16_t* ac = a + c * kChunk;
    __m512i x[R];
    __m512 p[R];
#pragma GCC unroll 8
    for (int w = 0; w < R; ++w) {
      const uint8_t* bytes = B + (m + w) * (K / 2) + c * (kChunk / 2);
      PrefetchCodes(bytes + kPrefetchBytes);
      PrefetchScales(absmax, (m + w) * K + c * kChunk, block_shift);
      x[w] = _mm512_loadu_si512(bytes);
      p[w] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m512bh act = reinterpret_cast<__m512bh>(_mm512_loadu_si512(ac + 32 * s));
#pragma GCC unroll 8
      for (int w = 0; w < R; ++w) {
        const __m512i idx = s == 0 ? x[w] : _mm512_srli_epi16(x[w], 4 * s);
        p[w] = _mm512_dpbf16_ps(p[w], reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(idx, table)), act);
      }
    }
#pragma GCC unroll 8
    for (int w = 0; w < R; ++w) {
      const int64_t f = (m + w) * K + c * kChunk;
      const __m512 scales =
          block_shift <= 6 ? LaneScales(absmax, f, block_shift) : _mm512_set1_ps(absmax[f >> block_shift]);
      t[w] = _mm512_fmadd_ps(p[w], scales, t[w]);
    }
  }
#pragma GCC unroll 8
  for (int w = 0; w < R; ++w) acc[w] = _mm512_reduce_add_ps(t[w]);
}

BNB_TARGET_AVX512BF16 void RowsBf16(const uint16_t* a, const uint8_t* B, const float* absmax, const float* code16,
                                    int64_t K, int block_shift, float* acc, int64_t row_begin, int64_t row_end) {
  uint16_t table[32];
  for (int i = 0; i < 32; ++i) table[i] = FloatToBF16(code16[i & 15]);
  const ChunkBf16 chunk{_mm512_loadu_si512(table), a};
  int64_t m = row_begin;
  if (K * int64_t{sizeof(uint16_t)} > kGroupAboveBytes) {
    for (; m + 3 < row_end; m += 4) {
      RowGroupBf16<4>(chunk.table, a, B, absmax, K, block_shift, m, acc + (m - row_begin));
    }
  }
  for (; m < row_end; ++m) {
    acc[m - row_begin] = RowSumAvx512Bf16(chunk, B + m * (K / 2), absmax, m * K, K / kChunk, block_shift);
  }
}

}  // namespace bnb::core::gemv4_x86

#endif  // BNB_GEMV4_X86
