// Vectorized 4-bit matrix-vector product, compiled once per instruction set by Highway and picked at run time.
//
// Single-token inference is bound by reading W, so each packed byte is read once and dequantized in registers:
// a vector of N bytes (2N weights) is widened to 32-bit lanes, its high nibbles (even elements) and low nibbles
// (odd elements) index the 16 code values held in registers (permutes, no gathers), and each half is multiplied
// with A split the same way beforehand (A's even and odd elements in two arrays), so no lanes are shuffled back
// into element order. Within one absmax block the products of unscaled code values are summed, then the block's
// sum is scaled by its absmax: one multiply per block instead of one per weight.
//
// Rows are processed a slice of K at a time, so the slice of A being read stays in L1 while W streams through.
#include <algorithm>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/gemv4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/gemv4_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_SCALAR

// One lane: the vector formulation buys nothing, so this target runs the definition itself.
void Gemv4Vec(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
              int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end) {
  Gemv4Scalar(dtype, A, B, absmax, code16, N, K, blocksize, out, row_begin, row_end);
}

#else

// File-local: other kernels' files define helpers of the same names in the same per-target namespaces.
namespace {

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

constexpr size_t kN = hn::MaxLanes(DF());

// Elements of K per pass over the rows: 4096 floats of A (16 KiB, 32 KiB when K is odd) stay in L1.
constexpr int64_t kSliceK = 4096;

// The 16 code values in registers, looked up per lane.
struct Table16 {
  static constexpr size_t kRegs = kN >= 16 ? 1 : 16 / kN;
  VF reg[kRegs];

  explicit Table16(const float* code16) {
    for (size_t k = 0; k < kRegs; ++k) reg[k] = hn::LoadU(DF(), code16 + k * kN);
  }

  // idx in [0, 16).
  HWY_INLINE VF Lookup(VI idx) const {
    const DF df;
    const DI di;
    if constexpr (kRegs == 1) {
      return hn::TableLookupLanes(reg[0], hn::IndicesFromVec(df, idx));
    } else {
      const auto lane = hn::IndicesFromVec(df, hn::And(idx, hn::Set(di, static_cast<int32_t>(kN - 1))));
      VF v = hn::TableLookupLanes(reg[0], lane);
      for (size_t k = 1; k < kRegs; ++k) {
        const auto in_k = hn::RebindMask(df, hn::Gt(idx, hn::Set(di, static_cast<int32_t>(k * kN - 1))));
        v = hn::IfThenElse(in_k, hn::TableLookupLanes(reg[k], lane), v);
      }
      return v;
    }
  }
};

// A widened to float, and split by nibble. A row whose first flat element m * K is even starts on a byte: byte t of
// the row holds elements 2t (high nibble) and 2t + 1 (low), multiplied by hi[0][t] = A[2t] and lo[0][t] = A[2t + 1].
// A row starting on an odd flat element (odd K, odd m) starts with a low nibble; its byte-aligned part pairs
// hi[1][t] = A[2t + 1] with lo[1][t] = A[2t + 2].
struct SplitA {
  std::vector<float> a;
  std::vector<float> hi[2], lo[2];

  SplitA(DType dtype, const void* A, int64_t K) : a(K) {
    for (int64_t k = 0; k < K; ++k) a[k] = LoadAsFloat(dtype, A, k);
    for (int par = 0; par < 2; ++par) {
      if (par == 1 && K % 2 == 0) break;  // every row starts on a byte
      const int64_t pairs = (K - par) / 2;
      hi[par].resize(pairs);
      lo[par].resize(pairs);
      for (int64_t t = 0; t < pairs; ++t) {
        hi[par][t] = a[2 * t + par];
        lo[par][t] = a[2 * t + par + 1];
      }
    }
  }
};

// sum over k in [k0, k1) of A[k] * W[m, k], in float32.
HWY_INLINE float RowSlice(const SplitA& sa, const Table16& table, const uint8_t* B, const float* absmax,
                          const float* code16, int64_t K, int block_shift, int64_t m, int64_t k0, int64_t k1) {
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
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df), acc2 = hn::Zero(df), acc3 = hn::Zero(df);
    for (; f + 4 * N <= seg_end; f += 4 * N) {
      const int64_t t = (f - base - par) >> 1;
      const VI x0 = hn::PromoteTo(di, hn::LoadU(DU8(), B + (f >> 1)));
      const VI x1 = hn::PromoteTo(di, hn::LoadU(DU8(), B + (f >> 1) + N));
      acc0 = hn::MulAdd(table.Lookup(hn::ShiftRight<4>(x0)), hn::LoadU(df, hi + t), acc0);
      acc1 = hn::MulAdd(table.Lookup(hn::And(x0, nibble)), hn::LoadU(df, lo + t), acc1);
      acc2 = hn::MulAdd(table.Lookup(hn::ShiftRight<4>(x1)), hn::LoadU(df, hi + t + N), acc2);
      acc3 = hn::MulAdd(table.Lookup(hn::And(x1, nibble)), hn::LoadU(df, lo + t + N), acc3);
    }
    for (; f + 2 * N <= seg_end; f += 2 * N) {
      const int64_t t = (f - base - par) >> 1;
      const VI x = hn::PromoteTo(di, hn::LoadU(DU8(), B + (f >> 1)));
      acc0 = hn::MulAdd(table.Lookup(hn::ShiftRight<4>(x)), hn::LoadU(df, hi + t), acc0);
      acc1 = hn::MulAdd(table.Lookup(hn::And(x, nibble)), hn::LoadU(df, lo + t), acc1);
    }
    for (; f < seg_end; ++f) scalar_sum += a[f - base] * code16[PackedCode4(B, f)];
    const float scale = absmax[block];
    total = hn::MulAdd(hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3)), hn::Set(df, scale), total);
    scalar_total += scalar_sum * scale;
  }
  return hn::GetLane(hn::SumOfLanes(df, total)) + scalar_total;
}

}  // namespace

void Gemv4Vec(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
              int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end) {
  (void)N;
  if (row_begin >= row_end) return;
  int block_shift = 0;
  while ((int64_t{1} << block_shift) < blocksize) ++block_shift;  // blocksize is a power of two
  const SplitA sa(dtype, A, K);
  const Table16 table(code16);
  std::vector<float> acc(row_end - row_begin, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kSliceK) {
    const int64_t k1 = std::min(K, k0 + kSliceK);
    for (int64_t m = row_begin; m < row_end; ++m) {
      acc[m - row_begin] += RowSlice(sa, table, B, absmax, code16, K, block_shift, m, k0, k1);
    }
  }
  for (int64_t m = row_begin; m < row_end; ++m) StoreFromFloat(dtype, out, m, acc[m - row_begin]);
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(Gemv4Vec);

void Gemv4(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
           int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(Gemv4Vec)(dtype, A, B, absmax, code16, N, K, blocksize, out, row_begin, row_end);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
