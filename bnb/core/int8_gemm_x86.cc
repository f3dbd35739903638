// The x86 kernels of the int8 matrix product C = A B^T (int8_gemm.h): AVX512-VNNI and AVX2.
//
// Dispatch: functions compiled with __attribute__((target(...))), chosen per call by int8_gemm.cc from the
// instruction set Highway dispatches to under the cpu.isa cap (so a cap below avx3 never runs VNNI code) and
// CPUID's AVX512-VNNI bit. Not Highway's AVX3_DL target (HWY_WANT_AVX3_DL), because (1) in Highway 1.0.3 that
// target also requires VBMI, VBMI2, VAES, VPCLMULQDQ, BITALG and POPCNTDQ, so Cascade Lake, which has VNNI and
// none of those, would lose the VNNI kernel; (2) it would compile every Highway kernel of bnb/core, tools/fuzz and
// tools/bench once more and add a tier to cpu.isa's names and to every per-target test, for one kernel; and (3)
// Highway 1.0.3 has no int8 dot product op, so this kernel is intrinsics either way.
//
// The product: A's rows are packed per call, a tile of rows interleaved in K steps (so a step's rows are one
// contiguous run, which avoids the L1 set conflicts of rows 4 KB apart) and zero-padded to whole steps; B's rows
// are read in place. A register tile of kRows A rows by kCols B
// rows accumulates whole dot products over K, then sums its vectors' lanes. Blocking: A in blocks of at most
// kPackedABytes; within one, B in panels of about kPanelBytes (kept in L2 while every tile of A's rows passes).
// The tiles of a panel prefetch the next panel, each its share, a line or a few per K step: B then streams from
// memory at an even pace under the computation, where a panel read by its own first pass stalls that pass.
//
// VNNI (vpdpbusd, u8 x s8 -> s32, four products per lane): B's bytes become unsigned by flipping their sign bit
// (b + 128), so each lane sums (b + 128) * a, and C = sum - 128 * (row sum of A), the row sums computed while
// packing. The sums wrap modulo 2^32 (|sum| can pass 2^31 for large K); C itself fits in int32, so the wrapped
// arithmetic gives it exactly.
// AVX2: sign extension to int16 and vpmaddwd (pairs of products into int32): exact without a correction.
// vpmaddubsw is never used: it saturates its int16 pair sums.
#include "bnb/core/int8_gemm_x86.h"

#if BNB_INT8_GEMM_X86

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#define BNB_TARGET_VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
#define BNB_TARGET_AVX2 __attribute__((target("avx2")))

namespace bnb::core::int8_gemm_x86 {
namespace {

constexpr int64_t kPackedABytes = int64_t{4} << 20;  // A's rows packed per block (L3-sized)
constexpr int64_t kPanelBytes = int64_t{256} << 10;  // B's rows per panel (L2-sized)

// What a tile prefetches as it goes: at each K step k < len, the line at base + r * stride + k of rows r < rows.
struct Prefetch {
  const int8_t* base = nullptr;
  int64_t stride = 0;
  int64_t rows = 0;
  int64_t len = 0;
};

// The prefetches of the K step at k. Hint T2 (the outer caches): a panel ahead would not stay in L1, and T0 there
// measured slower than no spread at all (tools/bench/NOTES.md, 'int8 product').
inline void PrefetchStep(const Prefetch& pf, int64_t k) {
  if (k >= pf.len) return;
  for (int64_t r = 0; r < pf.rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(pf.base + r * pf.stride + k), _MM_HINT_T2);
  }
}

// Each x(i, j) of a 4 x 4 register tile, and each x(i) of 4.
#define BNB_TILE4X4(x) x(0, 0) x(0, 1) x(0, 2) x(0, 3) x(1, 0) x(1, 1) x(1, 2) x(1, 3) \
  x(2, 0) x(2, 1) x(2, 2) x(2, 3) x(3, 0) x(3, 1) x(3, 2) x(3, 3)
#define BNB_EACH4(x) x(0) x(1) x(2) x(3)
// A tile's accumulator (i, j), or `zero` outside the tile's MR x NR.
#define BNB_AT(i, j) (i < MR && j < NR ? acc[4 * i + j] : zero)

// ---------------------------------------------------------------------------------------------------------------
// AVX512-VNNI: 4 x 4 tiles, K in 64-byte steps.

struct Vnni {
  static constexpr int kRows = 4, kCols = 4;
  static constexpr int64_t kStep = 64;
};

// Packs rows [0, rows) of A: row r's step s at packed[(r / 4) * 4 * Kp + s * 256 + (r % 4) * 64], zeros past K;
// sums[r] = the row's sum.
BNB_TARGET_VNNI void VnniPackA(const int8_t* A, int64_t lda, int64_t rows, int64_t K, int64_t Kp, int8_t* packed,
                               int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* src = A + r * lda;
    int8_t* dst = packed + (r / 4) * 4 * Kp + (r % 4) * 64;
    __m512i sum = _mm512_setzero_si512();
    for (int64_t k = 0; k < Kp; k += 64) {
      const int64_t left = K - k;
      const __m512i v = left >= 64 ? _mm512_loadu_si512(src + k)
                        : left > 0  ? _mm512_maskz_loadu_epi8(~__mmask64{0} >> (64 - left), src + k)
                                    : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + k * 4, v);
      sum = _mm512_dpbusd_epi32(sum, ones, v);
    }
    sums[r] = _mm512_reduce_add_epi32(sum);
  }
}

// acc[4 i + j] = the lane sums of (B[j, k] + 128) * A[i, k] over K, for i < MR and j < NR. With kPrefetch, also
// prefetches `pf` as it goes. Not inlined: inlined into its caller,
// GCC 12 copied the accumulators between registers (and spilled them) at every step.
template <int MR, int NR, bool kPrefetch>
__attribute__((noinline)) BNB_TARGET_VNNI void VnniAccumulate(const int8_t* pa, const int8_t* B, int64_t ldb,
                                                              int64_t K, Prefetch pf, __m512i* acc) {
#define BNB_DECLARE(i, j) __m512i c##i##j = _mm512_setzero_si512();
  BNB_TILE4X4(BNB_DECLARE)
#undef BNB_DECLARE
  const __m512i flip = _mm512_set1_epi8(-128);
  __m512i a0, a1, a2, a3, b0, b1, b2, b3;
#define BNB_DOT(i, j) \
  if constexpr (i < MR && j < NR) c##i##j = _mm512_dpbusd_epi32(c##i##j, b##j, a##i);
#define BNB_LOAD_A(i) \
  if constexpr (i < MR) a##i = _mm512_loadu_si512(pa + k * 4 + i * 64);
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    if constexpr (kPrefetch) PrefetchStep(pf, k);
#define BNB_LOAD_B(j) \
  if constexpr (j < NR) b##j = _mm512_xor_si512(_mm512_loadu_si512(B + j * ldb + k), flip);
    BNB_EACH4(BNB_LOAD_B)
    BNB_EACH4(BNB_LOAD_A)
    BNB_TILE4X4(BNB_DOT)
#undef BNB_LOAD_B
  }
  if (k < K) {  // the last partial step: B's bytes past K are not read (A's are packed zeros)
    const __mmask64 mask = ~__mmask64{0} >> (64 - (K - k));
#define BNB_LOAD_B(j) \
  if constexpr (j < NR) b##j = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, B + j * ldb + k), flip);
    BNB_EACH4(BNB_LOAD_B)
    BNB_EACH4(BNB_LOAD_A)
    BNB_TILE4X4(BNB_DOT)
#undef BNB_LOAD_B
  }
#undef BNB_LOAD_A
#undef BNB_DOT
#define BNB_STORE(i, j) \
  if constexpr (i < MR && j < NR) _mm512_store_si512(acc + 4 * i + j, c##i##j);
  BNB_TILE4X4(BNB_STORE)
#undef BNB_STORE
}

// Lane sums of pairs of vectors, a level of the reduction tree: pairs of 32-bit lanes, then of 64-bit lanes, then
// of 128-bit blocks.
BNB_TARGET_VNNI inline __m512i VnniPairs32(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
}
BNB_TARGET_VNNI inline __m512i VnniPairs64(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
}
BNB_TARGET_VNNI inline __m512i VnniPairs128(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, 0x88), _mm512_shuffle_i32x4(x, y, 0xDD));
}

// C[i, j] for the tile's i < MR, j < NR: its accumulators' lane sums, less 128 * sums[i], modulo 2^32.
template <int MR, int NR>
BNB_TARGET_VNNI void VnniTile(const int8_t* pa, const int8_t* B, int64_t ldb, int64_t K, const int32_t* sums,
                              int32_t* C, int64_t ldc, const Prefetch& pf) {
  alignas(64) __m512i acc[16];
  if (pf.rows > 0) {
    VnniAccumulate<MR, NR, true>(pa, B, ldb, K, pf, acc);
  } else {
    VnniAccumulate<MR, NR, false>(pa, B, ldb, K, pf, acc);
  }
  const __m512i zero = _mm512_setzero_si512();
#define BNB_ROW(i) VnniPairs64(VnniPairs32(BNB_AT(i, 0), BNB_AT(i, 1)), VnniPairs32(BNB_AT(i, 2), BNB_AT(i, 3)))
  // BNB_ROW(i): each 128-bit block holds partial sums of C[i, 0..3].
  // Block i of `sums4` holds C[i, 0..3].
  const __m512i sums4 = VnniPairs128(VnniPairs128(BNB_ROW(0), BNB_ROW(1)), VnniPairs128(BNB_ROW(2), BNB_ROW(3)));
#undef BNB_ROW
  const __m128i s = _mm_maskz_loadu_epi32(static_cast<__mmask8>((1u << MR) - 1), sums);
  const __m512i spread = _mm512_permutexvar_epi32(
      _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_castsi128_si512(s));
  const __m512i out = _mm512_sub_epi32(sums4, _mm512_slli_epi32(spread, 7));
  const __mmask8 cols = static_cast<__mmask8>((1u << NR) - 1);
  _mm_mask_storeu_epi32(C, cols, _mm512_castsi512_si128(out));
  if constexpr (MR > 1) _mm_mask_storeu_epi32(C + ldc, cols, _mm512_extracti32x4_epi32(out, 1));
  if constexpr (MR > 2) _mm_mask_storeu_epi32(C + 2 * ldc, cols, _mm512_extracti32x4_epi32(out, 2));
  if constexpr (MR > 3) _mm_mask_storeu_epi32(C + 3 * ldc, cols, _mm512_extracti32x4_epi32(out, 3));
}

// ---------------------------------------------------------------------------------------------------------------
// AVX2: 2 x 4 tiles (8 accumulators, 2 + 4 operands: 14 of the 16 registers), K in 16-byte steps.

struct Avx2 {
  static constexpr int kRows = 2, kCols = 4;
  static constexpr int64_t kStep = 16;
};

// Row r's step s at packed[(r / 2) * 2 * Kp + s * 32 + (r % 2) * 16], zeros past K.
void Avx2PackA(const int8_t* A, int64_t lda, int64_t rows, int64_t K, int64_t Kp, int8_t* packed, int32_t*) {
  for (int64_t r = 0; r < rows; ++r) {
    int8_t* dst = packed + (r / 2) * 2 * Kp + (r % 2) * 16;
    for (int64_t k = 0; k < Kp; k += 16) {
      const int64_t n = std::clamp<int64_t>(K - k, 0, 16);
      if (n > 0) std::memcpy(dst + k * 2, A + r * lda + k, static_cast<size_t>(n));
      std::memset(dst + k * 2 + n, 0, static_cast<size_t>(16 - n));
    }
  }
}

BNB_TARGET_AVX2 inline __m256i Avx2Widen(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// acc[4 i + j] = the lane sums of A[i, k] * B[j, k] over K (vpmaddwd pairs), for i < MR and j < NR; prefetches
// `pf` as VnniAccumulate does.
template <int MR, int NR, bool kPrefetch>
__attribute__((noinline)) BNB_TARGET_AVX2 void Avx2Accumulate(const int8_t* pa, const int8_t* B, int64_t ldb,
                                                              int64_t K, Prefetch pf, __m256i* acc) {
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00,
          c13 = c00;
  __m256i a0, a1, b0, b1, b2, b3;
#define BNB_DOT(i, j) \
  if constexpr (i < MR && j < NR) c##i##j = _mm256_add_epi32(c##i##j, _mm256_madd_epi16(a##i, b##j));
#define BNB_DOTS BNB_DOT(0, 0) BNB_DOT(0, 1) BNB_DOT(0, 2) BNB_DOT(0, 3) BNB_DOT(1, 0) BNB_DOT(1, 1) BNB_DOT(1, 2) \
  BNB_DOT(1, 3)
#define BNB_LOAD_A(i) \
  if constexpr (i < MR) a##i = Avx2Widen(pa + k * 2 + i * 16);
#define BNB_LOAD_B(j) \
  if constexpr (j < NR) b##j = Avx2Widen(B + j * ldb + k);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    if constexpr (kPrefetch) {
      if (k % 64 == 0) PrefetchStep(pf, k);
    }
    BNB_LOAD_A(0) BNB_LOAD_A(1) BNB_EACH4(BNB_LOAD_B) BNB_DOTS
  }
  if (k < K) {  // the last partial step: B's bytes past K are not read (A's are packed zeros)
    alignas(16) int8_t tail[4][16] = {};
    for (int j = 0; j < NR; ++j) std::memcpy(tail[j], B + j * ldb + k, static_cast<size_t>(K - k));
    BNB_LOAD_A(0) BNB_LOAD_A(1)
#define BNB_LOAD_TAIL(j) \
  if constexpr (j < NR) b##j = Avx2Widen(tail[j]);
    BNB_EACH4(BNB_LOAD_TAIL)
#undef BNB_LOAD_TAIL
    BNB_DOTS
  }
#undef BNB_LOAD_B
#undef BNB_LOAD_A
#undef BNB_DOTS
#undef BNB_DOT
#define BNB_STORE(i, j) \
  if constexpr (i < MR && j < NR) _mm256_store_si256(acc + 4 * i + j, c##i##j);
  BNB_STORE(0, 0) BNB_STORE(0, 1) BNB_STORE(0, 2) BNB_STORE(0, 3) BNB_STORE(1, 0) BNB_STORE(1, 1) BNB_STORE(1, 2)
  BNB_STORE(1, 3)
#undef BNB_STORE
}

BNB_TARGET_AVX2 inline __m256i Avx2Pairs32(__m256i x, __m256i y) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
}
BNB_TARGET_AVX2 inline __m256i Avx2Pairs64(__m256i x, __m256i y) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(x, y), _mm256_unpackhi_epi64(x, y));
}

template <int MR, int NR>
BNB_TARGET_AVX2 void Avx2Tile(const int8_t* pa, const int8_t* B, int64_t ldb, int64_t K, const int32_t*, int32_t* C,
                              int64_t ldc, const Prefetch& pf) {
  alignas(32) __m256i acc[8];
  if (pf.rows > 0) {
    Avx2Accumulate<MR, NR, true>(pa, B, ldb, K, pf, acc);
  } else {
    Avx2Accumulate<MR, NR, false>(pa, B, ldb, K, pf, acc);
  }
  const __m256i zero = _mm256_setzero_si256();
  const __m256i row0 = Avx2Pairs64(Avx2Pairs32(BNB_AT(0, 0), BNB_AT(0, 1)), Avx2Pairs32(BNB_AT(0, 2), BNB_AT(0, 3)));
  const __m256i row1 = Avx2Pairs64(Avx2Pairs32(BNB_AT(1, 0), BNB_AT(1, 1)), Avx2Pairs32(BNB_AT(1, 2), BNB_AT(1, 3)));
#undef BNB_AT
  // Low block: C[0, 0..3]; high block: C[1, 0..3].
  const __m256i out = _mm256_add_epi32(_mm256_permute2x128_si256(row0, row1, 0x20),
                                       _mm256_permute2x128_si256(row0, row1, 0x31));
  const __m128i cols = _mm_cmplt_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(NR));
  _mm_maskstore_epi32(C, cols, _mm256_castsi256_si128(out));
  if constexpr (MR > 1) _mm_maskstore_epi32(C + ldc, cols, _mm256_extracti128_si256(out, 1));
}

// ---------------------------------------------------------------------------------------------------------------
// The blocking, shared.

using TileFn = void (*)(const int8_t* pa, const int8_t* B, int64_t ldb, int64_t K, const int32_t* sums, int32_t* C,
                        int64_t ldc, const Prefetch& pf);

// Tiles[mr - 1][nr - 1]: the tile of mr x nr.
template <template <int, int> class Tile>
struct TileTable {
  TileFn fns[4][4] = {{Tile<1, 1>::Run, Tile<1, 2>::Run, Tile<1, 3>::Run, Tile<1, 4>::Run},
                      {Tile<2, 1>::Run, Tile<2, 2>::Run, Tile<2, 3>::Run, Tile<2, 4>::Run},
                      {Tile<3, 1>::Run, Tile<3, 2>::Run, Tile<3, 3>::Run, Tile<3, 4>::Run},
                      {Tile<4, 1>::Run, Tile<4, 2>::Run, Tile<4, 3>::Run, Tile<4, 4>::Run}};
};

template <int MR, int NR>
struct VnniTileFn {
  static void Run(const int8_t* pa, const int8_t* B, int64_t ldb, int64_t K, const int32_t* sums, int32_t* C,
                  int64_t ldc, const Prefetch& pf) {
    VnniTile<MR, NR>(pa, B, ldb, K, sums, C, ldc, pf);
  }
};

template <int MR, int NR>
struct Avx2TileFn {  // rows 3 and 4 never occur (kRows = 2)
  static void Run(const int8_t* pa, const int8_t* B, int64_t ldb, int64_t K, const int32_t* sums, int32_t* C,
                  int64_t ldc, const Prefetch& pf) {
    Avx2Tile<std::min(MR, 2), NR>(pa, B, ldb, K, sums, C, ldc, pf);
  }
};

// Call `call` of `calls`' share of the prefetch of the next panel, `rows` rows of K bytes from `next`: whole rows
// (up to 4) where the calls are fewer than the rows, else a run of one row.
Prefetch NextPanelShare(const int8_t* next, int64_t ldb, int64_t rows, int64_t K, int64_t call, int64_t calls) {
  Prefetch pf;
  if (K <= 0) return pf;
  if (calls < rows) {
    const int64_t per = std::min<int64_t>(4, (rows + calls - 1) / calls), first = call * per;
    if (first >= rows) return pf;
    pf = {next + first * ldb, ldb, std::min(per, rows - first), K};
  } else {
    const int64_t runs = (calls + rows - 1) / rows, row = call / runs;  // runs per row
    const int64_t run = (K + runs * 64 - 1) / (runs * 64) * 64, offset = call % runs * run;
    if (row >= rows || offset >= K) return pf;
    pf = {next + row * ldb + offset, ldb, 1, std::min(run, K - offset)};
  }
  return pf;
}

template <class Kernel, class PackA>
void Blocked(const TileFn (&tiles)[4][4], const PackA& pack, const int8_t* A, int64_t lda, const int8_t* B,
             int64_t ldb, int64_t M, int64_t K, int64_t n0, int64_t n1, int32_t* C, int64_t ldc) {
  constexpr int64_t kRows = Kernel::kRows, kCols = Kernel::kCols, kStep = Kernel::kStep;
  const int64_t Kp = std::max(kStep, (K + kStep - 1) / kStep * kStep);
  const int64_t all_tiles = (M + kRows - 1) / kRows;
  const int64_t block_rows = std::clamp<int64_t>(kPackedABytes / (kRows * Kp), 1, all_tiles) * kRows;
  const int64_t panel = std::max(kCols, kPanelBytes / Kp / kCols * kCols);
  // Uninitialized: packing writes every byte the tiles read.
  const std::unique_ptr<int8_t[]> packed_buffer(new int8_t[static_cast<size_t>(block_rows * Kp)]);
  int8_t* packed = packed_buffer.get();
  std::vector<int32_t> sums(static_cast<size_t>(block_rows));
  for (int64_t m0 = 0; m0 < M; m0 += block_rows) {
    const int64_t rows = std::min(block_rows, M - m0);
    pack(A + m0 * lda, lda, rows, K, Kp, packed, sums.data());
    for (int64_t p0 = n0; p0 < n1; p0 += panel) {
      const int64_t p1 = std::min(n1, p0 + panel);
      const int64_t calls = (rows + kRows - 1) / kRows * ((p1 - p0 + kCols - 1) / kCols);
      const int64_t next_rows = std::min(n1, p1 + panel) - p1;
      int64_t call = 0;
      for (int64_t t = 0; t < rows; t += kRows) {
        const int64_t mr = std::min(kRows, rows - t);
        for (int64_t n = p0; n < p1; n += kCols, ++call) {
          const int64_t nr = std::min(kCols, p1 - n);
          tiles[mr - 1][nr - 1](packed + t * Kp, B + n * ldb, ldb, K, sums.data() + t, C + (m0 + t) * ldc + n, ldc,
                                next_rows > 0 ? NextPanelShare(B + p1 * ldb, ldb, next_rows, K, call, calls)
                                              : Prefetch{});
        }
      }
    }
  }
}

}  // namespace

bool HasAvx512Vnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
}

void GemmAvx512Vnni(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
                    int64_t n1, int32_t* C, int64_t ldc) {
  static const TileTable<VnniTileFn> table;
  Blocked<Vnni>(table.fns, VnniPackA, A, lda, B, ldb, M, K, n0, n1, C, ldc);
}

void GemmAvx2(const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t M, int64_t K, int64_t n0,
              int64_t n1, int32_t* C, int64_t ldc) {
  static const TileTable<Avx2TileFn> table;
  Blocked<Avx2>(table.fns, Avx2PackA, A, lda, B, ldb, M, K, n0, n1, C, ldc);
}

}  // namespace bnb::core::int8_gemm_x86

#endif  // BNB_INT8_GEMM_X86
