// The blocked float32 product's AVX-512 kernels (gemm4_packed_x86.h): a dense matrix product's blocking, with the
// weight's panels dequantized from the packed layout where a dense product would copy them. Target attributes as
// gemv4_x86.cc's (which says why).
//
// A panel: two tiles (32 of W's rows) over kc columns of K, panel[k * 32 + 16 h + j] the value of tile t + h's row
// j at column k0 + k, code16[code] * scale in float32 (DequantizePacked4's value). A run's 32 bytes, as 16-bit words
// widened to 32-bit lanes, hold in lane j row j's two bytes of the column pair (2p, 2p + 1): their nibbles are the
// columns 2p, 2p + 1 (low nibbles) and 32 + 2p, 33 + 2p (high), each looked up by one vpermps (4 index bits).
// A block: rows of A in micro-blocks of kBlockedRows, a micro-block's values column by column, a[k * kBlockedRows
// + i] (the product broadcasts them in order).
#include "bnb/core/gemm4_packed_x86.h"

#if BNB_GEMV4_X86

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "bnb/core/dtype.h"

#define BNB_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq")))

namespace bnb::core::packed4_x86 {
namespace {

#include "bnb/core/gemm4_packed_x86-inl.h"  // Load16AsF32

constexpr int64_t kMr = kBlockedRows;

// R rows of a micro-block against a panel over kc columns, into c (R rows of 32 sums, 32 apart): 2R accumulators,
// each column two panel loads and R broadcasts. Each panel's sums start from zero and are added to c's after (two
// levels: float32 sums of K terms in one chain lost ~1.8x the accuracy of torch's product at K = 1024).
template <int R>
BNB_TARGET_AVX512 void MicroTile(const float* a, const float* panel, int64_t kc, float* c, bool accumulate) {
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(panel + k * 32), b1 = _mm512_load_ps(panel + k * 32 + 16);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(a[k * kMr + i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    _mm512_store_ps(c + i * 32, accumulate ? _mm512_add_ps(_mm512_load_ps(c + i * 32), acc[i][0]) : acc[i][0]);
    _mm512_store_ps(c + i * 32 + 16,
                    accumulate ? _mm512_add_ps(_mm512_load_ps(c + i * 32 + 16), acc[i][1]) : acc[i][1]);
  }
}

// The code values of 16 lanes' low 4 bits times their rows' scales.
BNB_TARGET_AVX512 inline __m512 Value(__m512i idx, __m512 table, __m512 scales) {
  return _mm512_mul_ps(_mm512_permutexvar_ps(idx, table), scales);
}

using MicroFn = void (*)(const float*, const float*, int64_t, float*, bool);

template <int... R>
constexpr auto MicroTable(std::integer_sequence<int, R...>) {
  return std::array<MicroFn, sizeof...(R)>{&MicroTile<R + 1>...};
}

}  // namespace

BNB_TARGET_AVX512 void BlockedPanel(const Packed4& w, const float* code16, int64_t t, int64_t tiles, int64_t k0,
                                    int64_t kc, float* panel) {
  const int64_t groups = w.K / kPackCols, blocks = w.K / w.blocksize;
  const __m512 table = _mm512_loadu_ps(code16);
  for (int64_t h = 0; h < 2; ++h) {
    float* dst = panel + 16 * h;
    if (h >= tiles) {  // no second tile: zeros, which add nothing
      for (int64_t k = 0; k < kc; ++k) _mm512_store_ps(dst + k * 32, _mm512_setzero_ps());
      continue;
    }
    const uint8_t* codes = w.codes + ((t + h) * groups + k0 / kPackCols) * kPackGroupBytes;
    const float* scales = w.scales + (t + h) * blocks * kPackRows;
    for (int64_t g = 0; g < kc / kPackCols; ++g) {
      const __m512 s = _mm512_loadu_ps(scales + (k0 + g * kPackCols) / w.blocksize * kPackRows);
      const uint8_t* runs = codes + g * kPackGroupBytes;
      float* out = dst + g * kPackCols * 32;
      for (int p = 0; p < 16; ++p) {
        const __m512i d = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(runs + 32 * p)));
        _mm512_store_ps(out + (2 * p) * 32, Value(d, table, s));
        _mm512_store_ps(out + (2 * p + 1) * 32, Value(_mm512_srli_epi32(d, 8), table, s));
        _mm512_store_ps(out + (32 + 2 * p) * 32, Value(_mm512_srli_epi32(d, 4), table, s));
        _mm512_store_ps(out + (33 + 2 * p) * 32, Value(_mm512_srli_epi32(d, 12), table, s));
      }
    }
  }
}

BNB_TARGET_AVX512 void BlockedArrange(DType dtype, const void* A, int64_t K, int64_t r0, int64_t rows, int64_t k0,
                                      int64_t kc, float* a) {
  // Four rows at a time: 16 columns of each, transposed within 128-bit lanes (lane l of t[j] holds the four rows'
  // column 4l + j), so each column's four values are one 16-byte store.
  for (int64_t i = 0; i < (rows + kMr - 1) / kMr * kMr; i += 4) {
    float* dst = a + i / kMr * kc * kMr + i % kMr;
    for (int64_t k = 0; k < kc; k += 16) {
      __m512 v[4];
      for (int64_t q = 0; q < 4; ++q) v[q] = i + q < rows ? Load16AsF32(dtype, A, (r0 + i + q) * K + k0 + k)
                                                          : _mm512_setzero_ps();
      const __m512 lo01 = _mm512_unpacklo_ps(v[0], v[1]), hi01 = _mm512_unpackhi_ps(v[0], v[1]);
      const __m512 lo23 = _mm512_unpacklo_ps(v[2], v[3]), hi23 = _mm512_unpackhi_ps(v[2], v[3]);
      const __m512d t[4] = {
          _mm512_unpacklo_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)),
          _mm512_unpackhi_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)),
          _mm512_unpacklo_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)),
          _mm512_unpackhi_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)),
      };
      float* col = dst + k * kMr;
      for (int j = 0; j < 4; ++j) {
        const __m512 tj = _mm512_castpd_ps(t[j]);
        _mm_storeu_ps(col + (j + 0) * kMr, _mm512_castps512_ps128(tj));
        _mm_storeu_ps(col + (j + 4) * kMr, _mm512_extractf32x4_ps(tj, 1));
        _mm_storeu_ps(col + (j + 8) * kMr, _mm512_extractf32x4_ps(tj, 2));
        _mm_storeu_ps(col + (j + 12) * kMr, _mm512_extractf32x4_ps(tj, 3));
      }
    }
  }
}

BNB_TARGET_AVX512 void BlockedRows(const float* a, int64_t rows, const float* panel, int64_t kc, float* c,
                                   bool accumulate) {
  static constexpr auto kMicro = MicroTable(std::make_integer_sequence<int, kMr>());
  for (int64_t i = 0; i < rows; i += kMr) {
    const int64_t r = std::min(kMr, rows - i);
    // The next micro-block's sums (or the next panel's first, which follow these), from L3 where a thread's sums
    // outgrow L2: fetched while this one multiplies.
    for (int64_t line = 0; line < kMr * 32 * 4; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(c + (i + kMr) * 32) + line, _MM_HINT_T0);
    }
    kMicro[r - 1](a + i * kc, panel, kc, c + i * 32, accumulate);
  }
}

}  // namespace bnb::core::packed4_x86

#endif  // BNB_GEMV4_X86
