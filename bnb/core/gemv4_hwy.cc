// Vectorized 4-bit matrix-vector product, compiled once per instruction set by Highway and picked at run time.
//
// Each packed byte of W is read once and dequantized in registers; its high nibble (an even element) and low nibble
// (the odd one) are multiplied with A's even and odd elements, split into two arrays beforehand, so no lanes are
// shuffled back into element order. Code values are summed unscaled and each group's sum is multiplied by its
// absmax: one multiply per block (or per vector of weights) instead of one per weight.
//
// Two ways to look up the 16 code values, both without gathers:
//   - fast path (K a multiple of 32, the usual case): byte shuffles within 128-bit blocks on a whole byte vector
//     (BytePlanes: four byte planes of float32 values; BytePlanes16: two of bfloat16 values, for bfloat16 A with
//     the code values rounded to bfloat16, Gemv4Kernel::kHighwayBf16), with A permuted beforehand into the order
//     those shuffles produce;
//   - general path (any K, row starts mid-byte, the rest of a row): 32-bit permutes (Table16), per absmax block.
// On Zen 3 a cross-lane 32-bit permute costs about three byte shuffles, so the fast path is the much faster one
// (figures: tools/bench/NOTES.md, '4-bit gemv').
//
// Rows are read whole: slicing K so that A stays in L1 measured slower here (W read in short strided runs costs
// more than A from L2), so only K beyond kSliceK is sliced.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemv4.h"
#include "bnb/core/gemv4_bands.h"
#include "bnb/core/gemv4_x86.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/gemv4_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether any of x[0, n) is infinite or NaN (exponent bits all ones): RowHasNonFiniteAbsmax, which every kernel asks
// of every row, where a scalar isfinite loop took a fifth of a cached 14336 x 4096 product.
bool AnyNonFinite(const float* x, int64_t n) {
  const hn::ScalableTag<uint32_t> du;
  const int64_t L = static_cast<int64_t>(hn::Lanes(du));
  const auto exponent = hn::Set(du, 0x7F800000u);
  auto any = hn::Zero(du);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto e = hn::And(hn::LoadU(du, reinterpret_cast<const uint32_t*>(x + i)), exponent);
    any = hn::Or(any, hn::VecFromMask(du, hn::Eq(e, exponent)));
  }
  bool found = !hn::AllTrue(du, hn::Eq(any, hn::Zero(du)));
  for (; i < n; ++i) found |= !std::isfinite(x[i]);
  return found;
}

#if HWY_TARGET == HWY_SCALAR

// One lane: the vector formulation buys nothing, so this target runs the definition itself (and never rounds the
// code values: ActiveGemv4Kernel names no bfloat16-code kernel here).
void Gemv4Vec(DType dtype, const void* A, const uint8_t* B, const float* absmax, const NestedAbsmax* nested,
              const float* code16, int64_t N, int64_t K, int64_t blocksize, void* out, int64_t row_begin,
              int64_t row_end, bool bf16_codes) {
  (void)bf16_codes;
  if (nested == nullptr) return Gemv4Scalar(dtype, A, B, absmax, code16, N, K, blocksize, out, row_begin, row_end);
  const int64_t out_size = DTypeSize(dtype);
  ForEachNestedBand(*nested, N, K, blocksize, row_begin, row_end, false,
                    [&](int64_t m0, const float* scales, int64_t r0, int64_t r1) {
                      Gemv4Scalar(dtype, A, B + m0 * K / 2, scales, code16, r1, K, blocksize,
                                  static_cast<char*>(out) + m0 * out_size, r0, r1);
                    });
}

// Small batches: the definition row by row (Gemm4SmallRuns names no kernel here; this keeps the entry whole).
std::vector<float> ArrangeSmallA(DType dtype, const void* A, int64_t M, int64_t K) {
  std::vector<float> out(M * K);
  for (int64_t i = 0; i < M * K; ++i) out[i] = LoadAsFloat(dtype, A, i);
  return out;
}

void Gemm4SmallVec(const float* a, int64_t M, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
                   int block_shift, float* acc, int64_t ldacc, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t r = 0; r < M; ++r) {
      acc[r * ldacc + (n - n0)] =
          Gemv4RowScalar(DType::kFloat32, a + r * K, B, absmax, code16, K, int64_t{1} << block_shift, n);
    }
  }
}

#else

// File-local: other kernels' files define helpers of the same names in the same per-target namespaces.
namespace {

using D8 = hn::ScalableTag<uint8_t>;
using D16 = hn::RepartitionToWide<D8>;
using V8 = hn::Vec<D8>;

// The fast path reads one byte vector per step: kBytes bytes, 2 * kBytes weights.
constexpr size_t kBytes = hn::MaxLanes(D8());
constexpr int64_t kChunk = 2 * static_cast<int64_t>(kBytes);

// Elements of K per pass over the rows: the A arrays of one slice (3 * 256 KiB) stay in L2.
constexpr int64_t kSliceK = 65536;
static_assert(kSliceK % kChunk == 0, "slices hold whole chunks");

// The 16 code values in registers, looked up per 32-bit lane (the general path).
using Table16 = RegTable<16>;

// The 16 code values as four byte planes (plane j: byte j of each value), for the fast path. Cross-lane 32-bit
// permutes are slow on many x86 cores (3x a byte shuffle on Zen 3); byte shuffles within 128-bit blocks are not.
// A vector of kBytes nibble indices becomes four float vectors: byte lookups give each value's four bytes, and two
// rounds of interleaving (8-bit, then 16-bit, within each 128-bit block) assemble them. Float vector q, block L,
// lane r then holds the value of index 16 * L + 4 * q + r; A is laid out in the same order beforehand.
struct BytePlanes {
  V8 plane[4];

  explicit BytePlanes(const float* code16) {
    HWY_ALIGN uint8_t bytes[4][16];
    for (int c = 0; c < 16; ++c) {
      const uint32_t bits = FloatToBits(code16[c]);
      for (int j = 0; j < 4; ++j) bytes[j][c] = static_cast<uint8_t>(bits >> (8 * j));
    }
    for (int j = 0; j < 4; ++j) plane[j] = hn::LoadDup128(D8(), bytes[j]);
  }

  // The values of kBytes indices as four float vectors, in the order Index gives.
  HWY_INLINE void Values(V8 idx, VF* v) const {
    const D8 d8;
    const D16 d16;
    const DF df;
    const V8 b0 = hn::TableLookupBytes(plane[0], idx);
    const V8 b1 = hn::TableLookupBytes(plane[1], idx);
    const V8 b2 = hn::TableLookupBytes(plane[2], idx);
    const V8 b3 = hn::TableLookupBytes(plane[3], idx);
    const auto l01 = hn::BitCast(d16, hn::InterleaveLower(d8, b0, b1));
    const auto h01 = hn::BitCast(d16, hn::InterleaveUpper(d8, b0, b1));
    const auto l23 = hn::BitCast(d16, hn::InterleaveLower(d8, b2, b3));
    const auto h23 = hn::BitCast(d16, hn::InterleaveUpper(d8, b2, b3));
    v[0] = hn::BitCast(df, hn::InterleaveLower(d16, l01, l23));
    v[1] = hn::BitCast(df, hn::InterleaveUpper(d16, l01, l23));
    v[2] = hn::BitCast(df, hn::InterleaveLower(d16, h01, h23));
    v[3] = hn::BitCast(df, hn::InterleaveUpper(d16, h01, h23));
  }

  // sum over q of v[q] * a[q * kN ...], as one vector: the order of the one-row kernel (Dot) and the small-batch
  // one (Gemm4SmallVec), which so give a row the same bits.
  static HWY_INLINE VF DotOf(const VF* v, const float* a, VF acc) {
    const DF df;
    acc = hn::MulAdd(v[0], hn::LoadU(df, a), acc);
    VF acc1 = hn::Mul(v[1], hn::LoadU(df, a + kN));
    acc = hn::MulAdd(v[2], hn::LoadU(df, a + 2 * kN), acc);
    acc1 = hn::MulAdd(v[3], hn::LoadU(df, a + 3 * kN), acc1);
    return hn::Add(acc, acc1);
  }

  // sum over q of values(idx)[q] * a[q * kN ...], as one vector.
  HWY_INLINE VF Dot(V8 idx, const float* a, VF acc) const {
    VF v[4];
    Values(idx, v);
    return DotOf(v, a, acc);
  }

  // Which of a chunk's kBytes indices float vector v, 128-bit block b, lane r holds (A's order for Dot).
  static int64_t Index(size_t v, size_t b, size_t r) { return static_cast<int64_t>(16 * b + 4 * v + r); }
};

// The 16 code values rounded to bfloat16, as two byte planes: the kernel for bfloat16 A with bfloat16 products
// (Gemv4Kernel::kHighwayBf16). Two byte lookups and one round of 8-bit interleaving give each value's 16 bits, in
// 32-bit lanes two by two; a shift or a mask makes each a float32. Half the shuffles of BytePlanes, whose second
// round of interleaving becomes a shift and an AND, which run on other ports. Float vector v, block b, lane r holds
// index 16 * b + 8 * (v / 2) + 2 * r + v % 2; A is laid out in that order beforehand.
struct BytePlanes16 {
  V8 lo, hi;

  explicit BytePlanes16(const float* code16) {
    HWY_ALIGN uint8_t bytes[2][16];
    for (int c = 0; c < 16; ++c) {
      const uint16_t bits = FloatToBF16(code16[c]);
      bytes[0][c] = static_cast<uint8_t>(bits);
      bytes[1][c] = static_cast<uint8_t>(bits >> 8);
    }
    lo = hn::LoadDup128(D8(), bytes[0]);
    hi = hn::LoadDup128(D8(), bytes[1]);
  }

  HWY_INLINE VF Dot(V8 idx, const float* a, VF acc) const {
    const D8 d8;
    const DU32 d32;
    const DF df;
    const auto w0 = hn::BitCast(d32, hn::InterleaveLower(d8, hn::TableLookupBytes(lo, idx),
                                                         hn::TableLookupBytes(hi, idx)));
    const auto w1 = hn::BitCast(d32, hn::InterleaveUpper(d8, hn::TableLookupBytes(lo, idx),
                                                         hn::TableLookupBytes(hi, idx)));
    const auto upper = hn::Set(d32, 0xFFFF0000u);
    acc = hn::MulAdd(hn::BitCast(df, hn::ShiftLeft<16>(w0)), hn::LoadU(df, a), acc);
    acc = hn::MulAdd(hn::BitCast(df, hn::And(w0, upper)), hn::LoadU(df, a + kN), acc);
    acc = hn::MulAdd(hn::BitCast(df, hn::ShiftLeft<16>(w1)), hn::LoadU(df, a + 2 * kN), acc);
    return hn::MulAdd(hn::BitCast(df, hn::And(w1, upper)), hn::LoadU(df, a + 3 * kN), acc);
  }

  static int64_t Index(size_t v, size_t b, size_t r) {
    return static_cast<int64_t>(16 * b + 8 * (v / 2) + 2 * r + v % 2);
  }
};

// A widened to float, and split by nibble. A row whose first flat element m * K is even starts on a byte: byte t of
// the row holds elements 2t (high nibble) and 2t + 1 (low), multiplied by hi[0][t] = A[2t] and lo[0][t] = A[2t + 1].
// A row starting on an odd flat element (odd K, odd m) starts with a low nibble; its byte-aligned part pairs
// hi[1][t] = A[2t + 1] with lo[1][t] = A[2t + 2].
// When K is a multiple of 32, every row starts on a multiple of 32 and the fast path applies to its whole chunks:
// hi_fast / lo_fast hold hi[0] / lo[0] in BytePlanes' order, chunk by chunk.
struct SplitA {
  std::vector<float> a;
  std::vector<float> hi[2], lo[2];
  std::vector<float> hi_fast, lo_fast;
  bool fast;
  int64_t fast_end;  // the fast path covers row elements [0, fast_end)

  // Planes: BytePlanes or BytePlanes16, whose order the fast arrays take. Built once per call and thread, for
  // every row: the general path's arrays only where some row has elements the fast path leaves.
  template <class Planes>
  SplitA(DType dtype, const void* A, int64_t K, const Planes*)
      : a(K), fast(K % 32 == 0), fast_end(fast ? K / kChunk * kChunk : 0) {
    // Widened a vector at a time (float16 element by element cost 7 us of a 10 us call at K = 4096).
    const auto widen = [&](auto type) {
      constexpr DType kT = decltype(type)::value;
      const int64_t N = static_cast<int64_t>(kN);
      int64_t k = 0;
      for (; k + N <= K; k += N) hn::StoreU(LoadF32<kT>(A, k), DF(), a.data() + k);
      for (; k < K; ++k) a[k] = LoadAsFloat(kT, A, k);
    };
    switch (dtype) {
      case DType::kFloat32: widen(std::integral_constant<DType, DType::kFloat32>{}); break;
      case DType::kFloat16: widen(std::integral_constant<DType, DType::kFloat16>{}); break;
      case DType::kBFloat16: widen(std::integral_constant<DType, DType::kBFloat16>{}); break;
    }
    for (int par = 0; par < 2 && fast_end < K; ++par) {
      if (par == 1 && K % 2 == 0) break;  // every row starts on a byte
      const int64_t pairs = (K - par) / 2;
      hi[par].resize(pairs);
      lo[par].resize(pairs);
      for (int64_t t = 0; t < pairs; ++t) {
        hi[par][t] = a[2 * t + par];
        lo[par][t] = a[2 * t + par + 1];
      }
    }
    hi_fast.resize(fast_end / 2);
    lo_fast.resize(fast_end / 2);
    for (int64_t c = 0; c < fast_end / kChunk; ++c) {
      for (size_t block = 0; block < kBytes / 16; ++block) {
        for (size_t v = 0; v < 4; ++v) {
          for (size_t r = 0; r < 4; ++r) {
            const int64_t to = c * kBytes + v * kN + 4 * block + r;
            const int64_t t = c * kBytes + Planes::Index(v, block, r);
            hi_fast[to] = a[2 * t];
            lo_fast[to] = a[2 * t + 1];
          }
        }
      }
    }
  }
};

// The absmax of each lane of a fast-path chunk's value vectors, whose first element is f: each 128-bit block covers
// 32 weights starting at a multiple of 32, so one absmax block.
HWY_INLINE VF ChunkScale(const float* absmax, int64_t f, int block_shift) {
  const DF df;
  const int64_t first = f >> block_shift;
  if (first == ((f + kChunk - 1) >> block_shift)) return hn::Set(df, absmax[first]);
  HWY_ALIGN float s[kN];
  for (size_t block = 0; block < kBytes / 16; ++block) {
    const float v = absmax[(f + 32 * static_cast<int64_t>(block)) >> block_shift];
    for (int r = 0; r < 4; ++r) s[4 * block + r] = v;
  }
  return hn::Load(df, s);
}

// code16: the values this kernel multiplies (the code values, or their bfloat16 roundings with BytePlanes16).
template <class Planes>
struct Kernel {
  const SplitA& sa;
  const Table16& table;
  const Planes& planes;
  const uint8_t* B;
  const float* absmax;
  const float* code16;
  int64_t K;
  int block_shift;

  // sum over k in [k0, k1) of A[k] * W[m, k], in float32. k0 is a multiple of kChunk.
  HWY_INLINE float RowSlice(int64_t m, int64_t k0, int64_t k1) const {
    const DF df;
    const int64_t base = m * K;
    VF total = hn::Zero(df);
    int64_t k = k0;
    if (sa.fast) {
      const D8 d8;
      const V8 nibble = hn::Set(d8, 0x0F);
      const int64_t fast_end = std::min(k1, sa.fast_end);
      for (; k < fast_end; k += kChunk) {
        const int64_t f = base + k;
        const V8 bytes = hn::LoadU(d8, B + (f >> 1));
        // Gemm4SmallVec sums a chunk so too.
        const VF sum = hn::Add(planes.Dot(hn::ShiftRight<4>(bytes), sa.hi_fast.data() + (k >> 1), hn::Zero(df)),
                               planes.Dot(hn::And(bytes, nibble), sa.lo_fast.data() + (k >> 1), hn::Zero(df)));
        total = hn::MulAdd(sum, ChunkScale(absmax, f, block_shift), total);
      }
    }
    return hn::GetLane(hn::SumOfLanes(df, total)) + General(m, k, k1);
  }

  // The same sum for any alignment: per absmax block, 32-bit lookups, scalar ends.
  HWY_INLINE float General(int64_t m, int64_t k0, int64_t k1) const {
    const DF df;
    const DI di;
    const int64_t N = static_cast<int64_t>(kN);
    const int64_t base = m * K;
    const int par = static_cast<int>(base & 1);
    const float* a = sa.a.data();
    const float* hi = sa.hi[par].data();
    const float* lo = sa.lo[par].data();
    const VI nibble = hn::Set(di, 0x0F);

    VF total = hn::Zero(df);
    float scalar_total = 0.0f;
    int64_t f = base + k0;
    const int64_t f_end = base + k1;
    while (f < f_end) {
      const int64_t block = f >> block_shift;
      const int64_t seg_end = std::min(f_end, (block + 1) << block_shift);
      float scalar_sum = 0.0f;
      if (f & 1) {  // an odd row start: its low nibble first
        scalar_sum += a[f - base] * code16[PackedCode4(B, f)];
        ++f;
      }
      VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
      for (; f + 2 * N <= seg_end; f += 2 * N) {
        const int64_t t = (f - base - par) >> 1;
        const VI x = hn::PromoteTo(di, hn::LoadU(DU8(), B + (f >> 1)));
        acc0 = hn::MulAdd(table.Lookup(hn::ShiftRight<4>(x)), hn::LoadU(df, hi + t), acc0);
        acc1 = hn::MulAdd(table.Lookup(hn::And(x, nibble)), hn::LoadU(df, lo + t), acc1);
      }
      for (; f < seg_end; ++f) scalar_sum += a[f - base] * code16[PackedCode4(B, f)];
      const float scale = absmax[block];
      total = hn::MulAdd(hn::Add(acc0, acc1), hn::Set(df, scale), total);
      scalar_total += scalar_sum * scale;
    }
    return hn::GetLane(hn::SumOfLanes(df, total)) + scalar_total;
  }
};

// Rows [row_begin, row_end) of one matrix (a nested band's, or the whole), A laid out already.
template <class Planes>
void Rows(DType dtype, const void* A, const SplitA& sa, const Table16& table, const Planes& planes,
          const float* values, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
          int64_t blocksize, void* out, int64_t row_begin, int64_t row_end) {
  const int block_shift = BlockShift(blocksize);
  const Kernel<Planes> kernel{sa, table, planes, B, absmax, values, K, block_shift};
  // Rows with an infinite or NaN absmax take the definition: sum(code * a) * absmax would turn the NaN of a code-0
  // weight (0 * inf) or of +inf and -inf weights meeting into +-inf, where the dense product gives NaN.
  std::vector<char> by_definition(row_end - row_begin, 0);
  for (int64_t m = row_begin; m < row_end; ++m) {
    by_definition[m - row_begin] = RowHasNonFiniteAbsmax(absmax, m, K, block_shift);
  }
  std::vector<float> acc(row_end - row_begin, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kSliceK) {
    const int64_t k1 = std::min(K, k0 + kSliceK);
    for (int64_t m = row_begin; m < row_end; ++m) {
      if (!by_definition[m - row_begin]) acc[m - row_begin] += kernel.RowSlice(m, k0, k1);
    }
  }
  for (int64_t m = row_begin; m < row_end; ++m) {
    if (by_definition[m - row_begin]) {
      Gemv4Scalar(dtype, A, B, absmax, code16, row_end, K, blocksize, out, m, m + 1);
    } else {
      StoreFromFloat(dtype, out, m, acc[m - row_begin]);
    }
  }
}

template <class Planes>
void RowsWith(DType dtype, const void* A, const uint8_t* B, const float* absmax, const NestedAbsmax* nested,
              const float* code16, const float* values, int64_t N, int64_t K, int64_t blocksize, void* out,
              int64_t row_begin, int64_t row_end) {
  const Planes planes(values);
  // A laid out once per call, for every band.
  const SplitA sa(dtype, A, K, &planes);
  const Table16 table = Table16::FromArray(values);
  if (nested == nullptr) {
    return Rows(dtype, A, sa, table, planes, values, B, absmax, code16, K, blocksize, out, row_begin, row_end);
  }
  const int64_t out_size = DTypeSize(dtype);
  ForEachNestedBand(*nested, N, K, blocksize, row_begin, row_end, false,
                    [&](int64_t m0, const float* scales, int64_t r0, int64_t r1) {
                      Rows(dtype, A, sa, table, planes, values, B + m0 * K / 2, scales, code16, K, blocksize,
                           static_cast<char*>(out) + m0 * out_size, r0, r1);
                    });
}

}  // namespace

// bf16_codes: multiply the code values rounded to bfloat16 (Gemv4Kernel::kHighwayBf16), else the exact ones.
void Gemv4Vec(DType dtype, const void* A, const uint8_t* B, const float* absmax, const NestedAbsmax* nested,
              const float* code16, int64_t N, int64_t K, int64_t blocksize, void* out, int64_t row_begin,
              int64_t row_end, bool bf16_codes) {
  if (row_begin >= row_end) return;
  if (!bf16_codes) {
    return RowsWith<BytePlanes>(dtype, A, B, absmax, nested, code16, code16, N, K, blocksize, out, row_begin,
                                row_end);
  }
  float rounded[16];
  for (int c = 0; c < 16; ++c) rounded[c] = BF16ToFloat(FloatToBF16(code16[c]));
  RowsWith<BytePlanes16>(dtype, A, B, absmax, nested, code16, rounded, N, K, blocksize, out, row_begin, row_end);
}

// Small batches (Gemm4Small where the AVX-512 kernels do not run; K a multiple of kSmallK, so of kChunk): each
// chunk of W's row looked up in registers once for all M rows of A (the exact code values), each row's products
// summed in float32 as the one-row kernel sums them. A is laid out chunk-major (ArrangeSmallA): chunk c
// of every row, then chunk c + 1, each in BytePlanes' order, so that a slice of chunks of all rows (kSmallSlice
// bytes) stays in L1 while a band of kSmallBand rows of W passes over it; each (W row, A row) pair keeps its lane
// totals between slices.
constexpr int64_t kSmallSlice = 8 << 10;
constexpr int64_t kSmallBand = 16;

std::vector<float> ArrangeSmallA(DType dtype, const void* A, int64_t M, int64_t K) {
  const int64_t chunks = K / kChunk;
  std::vector<float> out(M * K);
  const BytePlanes* order = nullptr;
  for (int64_t r = 0; r < M; ++r) {
    const SplitA sa(dtype, static_cast<const char*>(A) + r * K * DTypeSize(dtype), K, order);
    for (int64_t c = 0; c < chunks; ++c) {
      float* to = out.data() + (c * M + r) * kChunk;
      std::copy_n(sa.hi_fast.data() + c * kBytes, kBytes, to);
      std::copy_n(sa.lo_fast.data() + c * kBytes, kBytes, to + kBytes);
    }
  }
  return out;
}

// acc[r * ldacc + (n - n0)] = row r of A (laid out by ArrangeSmallA) times W's row n, for n in [n0, n1), in
// float32. Rows with a non-finite absmax are the caller's.
void Gemm4SmallVec(const float* a, int64_t M, const uint8_t* B, const float* absmax, const float* code16, int64_t K,
                   int block_shift, float* acc, int64_t ldacc, int64_t n0, int64_t n1) {
  const DF df;
  const D8 d8;
  const V8 nibble = hn::Set(d8, 0x0F);
  const VF zero = hn::Zero(df);
  const BytePlanes planes(code16);
  const int64_t chunks = K / kChunk;
  const int64_t slice = std::max<int64_t>(1, kSmallSlice / (M * kChunk * static_cast<int64_t>(sizeof(float))));
  std::vector<float> totals(kSmallBand * M * kN);
  for (int64_t b0 = n0; b0 < n1; b0 += kSmallBand) {
    const int64_t b1 = std::min(n1, b0 + kSmallBand);
    std::fill(totals.begin(), totals.end(), 0.0f);
    for (int64_t c0 = 0; c0 < chunks; c0 += slice) {
      const int64_t c1 = std::min(chunks, c0 + slice);
      for (int64_t n = b0; n < b1; ++n) {
        const uint8_t* row = B + n * (K / 2);
        float* t = totals.data() + (n - b0) * M * kN;
        for (int64_t c = c0; c < c1; ++c) {
          const V8 bytes = hn::LoadU(d8, row + c * kBytes);
          VF w[8];
          planes.Values(hn::ShiftRight<4>(bytes), w);
          planes.Values(hn::And(bytes, nibble), w + 4);
          const VF scale = ChunkScale(absmax, n * K + c * kChunk, block_shift);
          const float* ar = a + c * M * kChunk;
          for (int64_t r = 0; r < M; ++r, ar += kChunk) {
            // The one-row kernel's sums (RowSlice), the high nibbles' and the low, then the chunk's scale: each row
            // comes out as Rows computes it, bit for bit. Weights scaled once for all rows instead measured 2-4%
            // faster.
            const VF sum = hn::Add(BytePlanes::DotOf(w, ar, zero), BytePlanes::DotOf(w + 4, ar + 4 * kN, zero));
            hn::StoreU(hn::MulAdd(sum, scale, hn::LoadU(df, t + r * kN)), df, t + r * kN);
          }
        }
      }
    }
    for (int64_t n = b0; n < b1; ++n) {
      for (int64_t r = 0; r < M; ++r) {
        const float* t = totals.data() + ((n - b0) * M + r) * kN;
        // Rows' sum: 0 + (the lanes' sum + the general path's 0), here too.
        acc[r * ldacc + (n - n0)] = 0.0f + (hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, t))) + 0.0f);
      }
    }
  }
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(Gemv4Vec);
HWY_EXPORT(ArrangeSmallA);
HWY_EXPORT(Gemm4SmallVec);
HWY_EXPORT(AnyNonFinite);

bool RowHasNonFiniteAbsmax(const float* absmax, int64_t m, int64_t K, int block_shift) {
  const int64_t b0 = (m * K) >> block_shift, b1 = (((m + 1) * K - 1) >> block_shift) + 1;
  return HWY_DYNAMIC_DISPATCH(AnyNonFinite)(absmax + b0, b1 - b0);
}

Gemv4Kernel ActiveGemv4Kernel(DType dtype, int64_t K, bool bf16_products) {
#if BNB_GEMV4_X86
  // Highway numbers better x86 targets with lower bits (the AVX-512 ones at or below HWY_AVX3).
  if (K % gemv4_x86::kChunk == 0 && ActiveTarget() <= HWY_AVX3 && gemv4_x86::HasAvx512Bw()) {
    return dtype == DType::kBFloat16 && bf16_products && gemv4_x86::HasAvx512Bf16() ? Gemv4Kernel::kAvx512Bf16
                                                                                     : Gemv4Kernel::kAvx512;
  }
#endif
  // The scalar target runs the definition, exact code values.
  if (dtype == DType::kBFloat16 && bf16_products && ActiveTarget() != HWY_SCALAR) return Gemv4Kernel::kHighwayBf16;
  (void)K;
  return Gemv4Kernel::kHighway;
}

bool NativeProducts(DType dtype) {
  if (dtype == DType::kFloat32) return true;
#if BNB_GEMV4_X86
  if (ActiveTarget() > HWY_AVX3) return false;  // Highway numbers better x86 targets with lower bits
  return dtype == DType::kBFloat16 ? gemv4_x86::HasAvx512Bf16() : gemv4_x86::HasAvx512Fp16();
#else
  (void)dtype;
  return true;  // elsewhere torch's own choice stands (bnb has measured no other architecture)
#endif
}

bool IsAvx512(Gemv4Kernel kernel) { return kernel == Gemv4Kernel::kAvx512 || kernel == Gemv4Kernel::kAvx512Bf16; }

const char* Gemv4KernelName(Gemv4Kernel kernel) {
  switch (kernel) {
    case Gemv4Kernel::kAvx512Bf16: return "avx512bf16";
    case Gemv4Kernel::kAvx512: return "avx512";
    case Gemv4Kernel::kHighwayBf16: return "highway_bf16";
    case Gemv4Kernel::kHighway: break;
  }
  return "highway";
}

namespace {

// Gemv4 and Gemv4Nested: absmax, or (null and) the nested statistics.
void Gemv4Any(DType dtype, const void* A, const uint8_t* B, const float* absmax, const NestedAbsmax* nested,
              const float* code16, int64_t N, int64_t K, int64_t blocksize, void* out, int64_t row_begin,
              int64_t row_end, bool bf16_products) {
  if (row_begin >= row_end) return;
  const Gemv4Kernel kernel = ActiveGemv4Kernel(dtype, K, bf16_products);
  if (!IsAvx512(kernel)) {
    return HWY_DYNAMIC_DISPATCH(Gemv4Vec)(dtype, A, B, absmax, nested, code16, N, K, blocksize, out, row_begin,
                                          row_end, kernel == Gemv4Kernel::kHighwayBf16);
  }
#if BNB_GEMV4_X86
  // A laid out once for all bands.
  std::vector<float> a32;
  std::vector<uint16_t> a16;
  if (kernel == Gemv4Kernel::kAvx512Bf16) {
    a16 = gemv4_x86::ArrangeBf16(A, K);
  } else {
    a32 = gemv4_x86::ArrangeF32(dtype, A, K);
  }
  const int block_shift = BlockShift(blocksize);
  std::vector<float> acc;
  // Rows [r0, r1) of the band whose codes start at b and block scales at scales.
  const auto rows = [&](const uint8_t* b, const float* scales, void* o, int64_t r0, int64_t r1) {
    acc.resize(r1 - r0);
    if (kernel == Gemv4Kernel::kAvx512Bf16) {
      gemv4_x86::RowsBf16(a16.data(), b, scales, code16, K, block_shift, acc.data(), r0, r1);
    } else {
      gemv4_x86::RowsF32(a32.data(), b, scales, code16, K, block_shift, acc.data(), r0, r1);
    }
    for (int64_t m = r0; m < r1; ++m) {
      if (RowHasNonFiniteAbsmax(scales, m, K, block_shift)) {
        Gemv4Scalar(dtype, A, b, scales, code16, r1, K, blocksize, o, m, m + 1);
      } else {
        StoreFromFloat(dtype, o, m, acc[m - r0]);
      }
    }
  };
  if (nested == nullptr) return rows(B, absmax, out, row_begin, row_end);
  // m * K / 2 is exact for the rows a band starts on: blocksize is even, so m * K is.
  const int64_t out_size = DTypeSize(dtype);
  ForEachNestedBand(*nested, N, K, blocksize, row_begin, row_end, true,
                    [&](int64_t m0, const float* scales, int64_t r0, int64_t r1) {
                      rows(B + m0 * K / 2, scales, static_cast<char*>(out) + m0 * out_size, r0, r1);
                    });
#endif
}

}  // namespace

bool Gemm4SmallRuns(DType dtype, int64_t M, int64_t K, bool bf16_products) {
  if (M < 1 || M > kSmallMaxRowsHighway) return false;
  if (IsAvx512(ActiveGemv4Kernel(dtype, K, bf16_products))) return M <= kSmallMaxRows;
  return K % kSmallK == 0 && K <= kSmallMaxK && ActiveTarget() != HWY_SCALAR;
}

Gemm4SmallKernel ActiveGemm4SmallKernel(DType dtype, int64_t M, int64_t K, bool bf16_products) {
  if (!Gemm4SmallRuns(dtype, M, K, bf16_products)) return Gemm4SmallKernel::kNone;
  switch (ActiveGemv4Kernel(dtype, K, bf16_products)) {
    case Gemv4Kernel::kAvx512Bf16: return Gemm4SmallKernel::kAvx512Bf16;
    case Gemv4Kernel::kAvx512: return Gemm4SmallKernel::kAvx512;
    case Gemv4Kernel::kHighway:
    case Gemv4Kernel::kHighwayBf16: break;
  }
  return Gemm4SmallKernel::kHighway;
}

namespace {

bool IsAvx512Small(Gemm4SmallKernel kernel) {
  return kernel == Gemm4SmallKernel::kAvx512 || kernel == Gemm4SmallKernel::kAvx512Bf16;
}

}  // namespace

const char* Gemm4SmallKernelName(Gemm4SmallKernel kernel) {
  switch (kernel) {
    case Gemm4SmallKernel::kHighway: return "highway";
    case Gemm4SmallKernel::kAvx512: return "avx512";
    case Gemm4SmallKernel::kAvx512Bf16: return "avx512bf16";
    case Gemm4SmallKernel::kNone: break;
  }
  return "none";
}

Gemm4SmallA ArrangeGemm4Small(DType dtype, const void* A, int64_t M, int64_t K, bool bf16_products) {
  Gemm4SmallA a{ActiveGemm4SmallKernel(dtype, M, K, bf16_products), dtype, A, M, K, {}, {}};
  if (a.kernel == Gemm4SmallKernel::kHighway) {
    a.a32 = HWY_DYNAMIC_DISPATCH(ArrangeSmallA)(dtype, A, M, K);
  }
#if BNB_GEMV4_X86
  if (!IsAvx512Small(a.kernel)) return a;
  // Each chunk of A's rows straight to its place for the AVX-512 kernels' passes (PassOffset).
  const bool bf16 = a.kernel == Gemm4SmallKernel::kAvx512Bf16;
  (bf16 ? a.a16.resize(M * K) : a.a32.resize(M * K));
  const auto place = [M, K](const auto& row, auto* all, int64_t r) {
    for (int64_t c = 0; c < K / gemv4_x86::kChunk; ++c) {
      std::copy_n(row.data() + c * gemv4_x86::kChunk, gemv4_x86::kChunk, all + gemv4_x86::PassOffset(r, M, K, c));
    }
  };
  for (int64_t r = 0; r < M; ++r) {
    const void* row = static_cast<const char*>(A) + r * K * DTypeSize(dtype);
    if (bf16) {
      place(gemv4_x86::ArrangeBf16(row, K), a.a16.data(), r);
    } else {
      place(gemv4_x86::ArrangeF32(dtype, row, K), a.a32.data(), r);
    }
  }
#endif
  return a;
}

void Gemm4Small(const Gemm4SmallA& a, const uint8_t* B, const float* absmax, const NestedAbsmax* nested,
                const float* code16, int64_t N, int64_t blocksize, const void* bias, void* out, int64_t n0,
                int64_t n1) {
  if (n0 >= n1 || a.kernel == Gemm4SmallKernel::kNone) return;
  const DType dtype = a.dtype;
  const int64_t M = a.M, K = a.K, size = DTypeSize(dtype);
  const int block_shift = BlockShift(blocksize);
  std::vector<float> acc;
  // W's rows [r0, r1) of the band whose codes start at b and block scales at scales, W row m0 + n of the whole.
  const auto rows = [&](const uint8_t* b, const float* scales, int64_t m0, int64_t r0, int64_t r1) {
    acc.resize(M * (r1 - r0));
    switch (a.kernel) {
      case Gemm4SmallKernel::kHighway:
        HWY_DYNAMIC_DISPATCH(Gemm4SmallVec)(a.a32.data(), M, b, scales, code16, K, block_shift, acc.data(), r1 - r0,
                                            r0, r1);
        break;
#if BNB_GEMV4_X86
      case Gemm4SmallKernel::kAvx512Bf16:
        gemv4_x86::SmallBf16(a.a16.data(), M, b, scales, code16, K, block_shift, acc.data(), r1 - r0, r0, r1);
        break;
      case Gemm4SmallKernel::kAvx512:
        gemv4_x86::SmallF32(a.a32.data(), M, b, scales, code16, K, block_shift, acc.data(), r1 - r0, r0, r1);
        break;
#endif
      default:
        return;
    }
    for (int64_t n = r0; n < r1; ++n) {
      const bool by_definition = RowHasNonFiniteAbsmax(scales, n, K, block_shift);
      const float add = bias == nullptr ? 0.0f : LoadAsFloat(dtype, bias, m0 + n);
      for (int64_t r = 0; r < M; ++r) {
        const void* a_row = static_cast<const char*>(a.A) + r * K * size;
        float v = by_definition ? Gemv4RowScalar(dtype, a_row, b, scales, code16, K, blocksize, n)
                                : acc[r * (r1 - r0) + (n - r0)];
        if (bias != nullptr) v = v + add;
        StoreFromFloat(dtype, out, r * N + m0 + n, v);
      }
    }
  };
  if (nested == nullptr) return rows(B, absmax, 0, n0, n1);
  ForEachNestedBand(*nested, N, K, blocksize, n0, n1, IsAvx512Small(a.kernel),
                    [&](int64_t m0, const float* scales, int64_t r0, int64_t r1) {
                      rows(B + m0 * K / 2, scales, m0, r0, r1);
                    });
}

void Gemm4Small(DType dtype, const void* A, int64_t M, const uint8_t* B, const float* absmax,
                const NestedAbsmax* nested, const float* code16, int64_t N, int64_t K, int64_t blocksize,
                const void* bias, void* out, int64_t n0, int64_t n1, bool bf16_products) {
  Gemm4Small(ArrangeGemm4Small(dtype, A, M, K, bf16_products), B, absmax, nested, code16, N, blocksize, bias, out,
             n0, n1);
}

void Gemv4(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
           int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end, bool bf16_products) {
  Gemv4Any(dtype, A, B, absmax, nullptr, code16, N, K, blocksize, out, row_begin, row_end, bf16_products);
}

void Gemv4Nested(DType dtype, const void* A, const uint8_t* B, const NestedAbsmax& absmax, const float* code16,
                 int64_t N, int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end,
                 bool bf16_products) {
  Gemv4Any(dtype, A, B, nullptr, &absmax, code16, N, K, blocksize, out, row_begin, row_end, bf16_products);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
