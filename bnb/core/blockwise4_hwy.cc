// Vectorized blockwise 4-bit kernels, compiled once per instruction set by Highway and picked at run time.
// Every per-element rule (absmax, scaling, nearest code, packing, rounding) is the scalar one of blockwise4.h;
// blocks whose absmax is 0, inf or NaN, and vector tails, take the scalar code path directly.
//
// No gathers (slow on many x86 cores): the 15 midpoints and the 16 code values live in registers and are looked up
// per lane with in-register permutes (Highway's TableLookupLanes / TableLookupBytes; AVX-512's two-register
// permutes for the quantize's bucket tables, Bucket4).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>

#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise4_x86.h"
#include "bnb/core/cpu_isa.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/blockwise4_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_SCALAR

// One lane: the vector formulation buys nothing, so this target runs the definition itself.
void Quantize4(DType dtype, const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed, float* absmax) {
  QuantizeBlockwise4Scalar(dtype, x, q, r, packed, absmax);
}
void Dequantize4(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                const Blockwise4Range& r, void* out) {
  DequantizeBlockwise4Scalar(dtype, packed, absmax, code16, r, out);
}

#else

// File-local: other kernels' files define helpers of the same names in the same per-target namespaces.
namespace {

// Whole byte vectors for packing: pairs of codes are combined as 16-bit lanes, then narrowed to one byte each.
using D8 = hn::ScalableTag<uint8_t>;
using D16 = hn::RepartitionToWide<D8>;
using DI16 = hn::RebindToSigned<D16>;
using DPacked = hn::Rebind<uint8_t, D16>;

// SortedPosition4 for one value per lane, in two flat rounds instead of four dependent steps: the group g (0..3)
// is the count of midpoints 3, 7 and 11 below the value, then the position is 4g plus the count of midpoints
// 4g, 4g + 1 and 4g + 2 below it. Six independent compares, which overlap, where a binary search chains four
// dependent ones (figures: tools/bench/NOTES.md, '4-bit quantize: position search').
struct Search4 {
  VF m3, m7, m11;
  RegTable<4> first, second, third;  // by group g: midpoints 4g, 4g + 1, 4g + 2

  explicit Search4(const Codebook4& cb) {
    const DF df;
    m3 = hn::Set(df, cb.midpoints[3]);
    m7 = hn::Set(df, cb.midpoints[7]);
    m11 = hn::Set(df, cb.midpoints[11]);
    float m[3][4];
    for (int g = 0; g < 4; ++g) {
      for (int k = 0; k < 3; ++k) m[k][g] = cb.midpoints[4 * g + k];
    }
    first = RegTable<4>::FromArray(m[0]);
    second = RegTable<4>::FromArray(m[1]);
    third = RegTable<4>::FromArray(m[2]);
  }

  // Number of midpoints strictly below each lane (NaN: 0, as every comparison is false).
  HWY_INLINE VI Position(VF v) const {
    const DF df;
    const DI di;
    // A compare mask is -1 in every lane where it holds: subtracting masks counts them.
    const auto count3 = [&](hn::Mask<DF> a, hn::Mask<DF> b, hn::Mask<DF> c) {
      const auto ones = [&](hn::Mask<DF> m) { return hn::BitCast(di, hn::VecFromMask(df, m)); };
      return hn::Sub(hn::Sub(hn::Neg(ones(a)), ones(b)), ones(c));
    };
    const VI g = count3(hn::Gt(v, m3), hn::Gt(v, m7), hn::Gt(v, m11));
    const VI in = count3(hn::Gt(v, first.Lookup(g)), hn::Gt(v, second.Lookup(g)), hn::Gt(v, third.Lookup(g)));
    return hn::Add(hn::ShiftLeft<2>(g), in);
  }
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// SortedPosition4 on AVX-512 by buckets of the scaled value: bucket k (-16 <= k < 16) holds [k/16, (k+1)/16) (the
// last one [15/16, 1]), so its index is floor(v * 16) (exact: a power-of-two scale; -0 goes with +0, which compares
// equal to it), at most 15 (v = 1). The 32 buckets' tables live in register pairs (vpermi2d / vpermi2ps), whose
// index bits 0-4 are k mod 32, so no sign has to be split off: `base`, the midpoints below every value of the
// bucket, and up to two midpoints inside it, `t1` <= `t2` (+inf for none). The position is base plus the
// thresholds below v: one permute and compare per threshold, where Search4 makes six compares and three lookups.
// Applies where no bucket holds more than two midpoints: NF4's are 0.08 or more apart, FP4's three about 0 fall
// into two buckets. Takes v in [-1, 1] only: the vector path runs for blocks of finite absmax, so no NaN (a NaN
// element makes the absmax NaN).
//
// The 32 buckets' plan (table entry k mod 32 for bucket k): base, t1, t2, and whether a bucket holds two
// midpoints; false where one holds more.
struct Bucket4Plan {
  static constexpr int kBuckets = 32;
  HWY_ALIGN int32_t base[kBuckets];
  HWY_ALIGN float t1[kBuckets], t2[kBuckets];
  bool two = false;

  bool Make(const Codebook4& cb) {
    const float inf = std::numeric_limits<float>::infinity();
    for (int i = 0; i < kBuckets; ++i) {
      const int k = i < kBuckets / 2 ? i : i - kBuckets;
      const float lo = static_cast<float>(k) / 16.0f, hi = static_cast<float>(k + 1) / 16.0f;
      int below = 0, inside = 0;
      float t[kCodebook4Size] = {};
      for (const float m : cb.midpoints) {
        below += m < lo;
        if (m >= lo && (k == 15 || m < hi)) {
          if (inside == 2) return false;
          t[inside++] = m;
        }
      }
      two |= inside == 2;
      base[i] = below;
      t1[i] = inside > 0 ? t[0] : inf;
      t2[i] = inside > 1 ? t[1] : inf;
    }
    return true;
  }
};

// A plan (Bucket4Plan, KeyPlan) for q's codebook, made at its first use (not per call: small tensors are many
// calls); null where the codebook has none.
template <class Plan>
const Plan* PlanFor(Quant4 q) {
  const auto made = [](Quant4 of) -> const Plan* {
    auto* plan = new Plan;  // kept for the process
    if (plan->Make(GetCodebook4(of))) return plan;
    delete plan;
    return nullptr;
  };
  static const Plan* const plans[2] = {made(Quant4::kNF4), made(Quant4::kFP4)};
  return plans[q == Quant4::kNF4 ? 0 : 1];
}

template <bool kTwo>  // some bucket holds two midpoints
struct Bucket4 {
  __m512i base_lo, base_hi;
  __m512 t1_lo, t1_hi, t2_lo, t2_hi;

  explicit Bucket4(const Bucket4Plan& plan)
      : base_lo(_mm512_load_si512(plan.base)),
        base_hi(_mm512_load_si512(plan.base + 16)),
        t1_lo(_mm512_load_ps(plan.t1)),
        t1_hi(_mm512_load_ps(plan.t1 + 16)),
        t2_lo(_mm512_load_ps(plan.t2)),
        t2_hi(_mm512_load_ps(plan.t2 + 16)) {}

  HWY_INLINE VI Position(VF vf) const {
    const __m512 v = vf.raw;
    const __m512i k = _mm512_min_epi32(
        _mm512_cvt_roundps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(16.0f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
        _mm512_set1_epi32(15));
    __m512i pos = _mm512_permutex2var_epi32(base_lo, k, base_hi);
    const __m512i one = _mm512_set1_epi32(1);
    const __mmask16 above1 = _mm512_cmp_ps_mask(v, _mm512_permutex2var_ps(t1_lo, k, t1_hi), _CMP_GT_OQ);
    pos = _mm512_mask_add_epi32(pos, above1, pos, one);
    if constexpr (kTwo) {
      const __mmask16 above2 = _mm512_cmp_ps_mask(v, _mm512_permutex2var_ps(t2_lo, k, t2_hi), _CMP_GT_OQ);
      pos = _mm512_mask_add_epi32(pos, above2, pos, one);
    }
    return VI{pos};
  }
};

// Blocks of up to 1 KB take SixteenBlockAbsmax (16 of them stay in L1 for the quantize loops after); larger ones
// amortize their own reduction.
constexpr int64_t kSixteenBlocksMaxBytes = 1024;

// The absmaxes of the 16 blocks of `bs` elements from element lo (bs * the element's size a multiple of 64 bytes),
// each BlockAbsmax's: per block the vector max of the magnitude bits, then the 16 vectors reduced together by four
// rounds of shuffles and maxes, where BlockAbsmax reduces each block's vector alone (a chain of dependent shuffles
// per block, ahead of the block's quantize loop).
template <DType kT>
HWY_INLINE void SixteenBlockAbsmax(const void* x, int64_t lo, int64_t bs, float* amax) {
  constexpr bool kWide = kT == DType::kFloat32;
  constexpr int64_t kSize = DTypeSize(kT);
  const __m512i magnitude = _mm512_set1_epi32(kWide ? 0x7FFFFFFF : 0x7FFF7FFF);
  __m512i m[16];
  for (int j = 0; j < 16; ++j) {
    const char* p = static_cast<const char*>(x) + (lo + j * bs) * kSize;
    __m512i v = _mm512_setzero_si512();
    for (int64_t off = 0; off < bs * kSize; off += 64) {
      hwy::Prefetch(p + off + kStreamAheadBytes);
      const __m512i bits = _mm512_and_si512(_mm512_loadu_si512(p + off), magnitude);
      v = kWide ? _mm512_max_epi32(v, bits) : _mm512_max_epi16(v, bits);
    }
    // 16-bit magnitudes: both halves of a lane, as 32-bit integers.
    if constexpr (!kWide) {
      v = _mm512_max_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(v, 16));
    }
    m[j] = v;
  }
  // Round 1: block pairs' 256-bit halves (lanes 0-7 block 2j, 8-15 block 2j + 1); 2: 128-bit quarters (a block per
  // quarter); 3: 64-bit pairs in each quarter; 4: 32-bit pairs. Quarter c then holds blocks c, 4 + c, 8 + c, 12 + c.
  for (int j = 0; j < 8; ++j) {
    m[j] = _mm512_max_epi32(_mm512_shuffle_i64x2(m[2 * j], m[2 * j + 1], 0x44),
                            _mm512_shuffle_i64x2(m[2 * j], m[2 * j + 1], 0xEE));
  }
  for (int j = 0; j < 4; ++j) {
    m[j] = _mm512_max_epi32(_mm512_shuffle_i64x2(m[2 * j], m[2 * j + 1], 0x88),
                            _mm512_shuffle_i64x2(m[2 * j], m[2 * j + 1], 0xDD));
  }
  for (int j = 0; j < 2; ++j) {
    m[j] = _mm512_max_epi32(_mm512_unpacklo_epi64(m[2 * j], m[2 * j + 1]),
                            _mm512_unpackhi_epi64(m[2 * j], m[2 * j + 1]));
  }
  const __m512 a = _mm512_castsi512_ps(m[0]), b = _mm512_castsi512_ps(m[1]);
  const __m512i r = _mm512_max_epi32(_mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                                     _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
  HWY_ALIGN int32_t bits[16];
  _mm512_store_si512(bits, r);
  using T = std::conditional_t<kWide, int32_t, int16_t>;
  for (int j = 0; j < 16; ++j) amax[j] = AbsmaxFromBits(kT, static_cast<T>(bits[4 * (j % 4) + j / 4]));
}

// Positions (0..15) as bytes: one vpmovdb, where DemoteTo packs twice and permutes.
HWY_INLINE void StorePositions(VI p, uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(p.raw));
}
#else
HWY_INLINE void StorePositions(VI p, uint8_t* out) { hn::StoreU(hn::DemoteTo(DU8(), p), DU8(), out); }
#endif

// The absmax of each block, asked for in increasing order: on AVX-512, small whole blocks 16 at a time
// (SixteenBlockAbsmax), which leaves those blocks in L1 for their quantize loops; otherwise by BlockAbsmax.
template <DType kT>
class BlockAbsmaxes {
 public:
  BlockAbsmaxes(const void* x, const Blockwise4Range& r) : x_(x), n_(r.n), bs_(r.blocksize), end_(r.block_end) {}

  // Block b's absmax; `in_l1`: whether its group's pass has just read the block.
  HWY_INLINE float Of(int64_t b, bool& in_l1) {
    const int64_t lo = b * bs_;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    in_l1 = b - group_begin_ < 16;
    if (in_l1) return group_[b - group_begin_];
    if (grouped_ && b + 16 <= end_ && (b + 16) * bs_ <= n_) {
      SixteenBlockAbsmax<kT>(x_, lo, bs_, group_);
      group_begin_ = b;
      in_l1 = true;
      return group_[0];
    }
#else
    in_l1 = false;
#endif
    return BlockAbsmax<kT>(x_, lo, std::min(lo + bs_, n_));
  }

 private:
  const void* x_;
  const int64_t n_, bs_, end_;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  const bool grouped_ = bs_ * DTypeSize(kT) <= kSixteenBlocksMaxBytes && bs_ * DTypeSize(kT) % 64 == 0;
  HWY_ALIGN float group_[16];
  int64_t group_begin_ = -16;
#endif
};

// Whether a sorted position is its own code (NF4), so the kernels skip the mapping.
inline bool PositionsAreCodes(const Codebook4& cb) {
  for (int k = 0; k < kCodebook4Size; ++k) {
    if (cb.sorted_to_code[k] != k) return false;
  }
  return true;
}

HWY_ALIGN constexpr uint8_t kIdentity4[kCodebook4Size] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// Sorted positions p[0, len) as codes (through the 16 bytes at to_code, or as they are when it is null) packed two
// per byte into dst, bitsandbytes' way. In a 16-bit lane the even element is the low byte (little-endian) and goes
// to the high nibble; an odd len leaves the last low nibble 0 (for PadOddEnd4).
HWY_INLINE void PackCodes4(const uint8_t* p, int64_t len, const uint8_t* to_code, uint8_t* dst) {
  const D8 d8;
  const D16 d16;
  const int64_t L8 = static_cast<int64_t>(hn::Lanes(d8));
  const uint8_t* code_of = to_code != nullptr ? to_code : kIdentity4;
  // pshufb-style lookups index within each 128-bit block, so every block gets the 16-entry table.
  const auto code_table = hn::LoadDup128(d8, code_of);
  int64_t j = 0;
  for (; j + L8 <= len; j += L8) {
    auto c = hn::LoadU(d8, p + j);
    if (to_code != nullptr) c = hn::TableLookupBytes(code_table, c);
    const auto w = hn::BitCast(d16, c);
    const auto pair = hn::Or(hn::ShiftLeft<4>(hn::And(w, hn::Set(d16, 0xFF))), hn::ShiftRight<8>(w));
    hn::StoreU(hn::DemoteTo(DPacked(), hn::BitCast(DI16(), pair)), DPacked(), dst + j / 2);
  }
  for (; j + 1 < len; j += 2) dst[j / 2] = static_cast<uint8_t>((code_of[p[j]] << 4) | code_of[p[j + 1]]);
  if (j < len) dst[j / 2] = static_cast<uint8_t>(code_of[p[j]] << 4);
}

// Where the search is quick (eight lanes and up), bfloat16 blocks below this size are coded faster by it than by
// table: each block looks up a different one of the 128 tables (230 KB in all), so its loads miss L1. With fewer
// lanes the tables win at every blocksize (figures: tools/bench/NOTES.md, '4-bit quantize: tables or search').
constexpr int64_t kBf16TablesFrom = 128;

// Blocks [r.block_begin, r.block_end) with the positions found by `search`.
template <DType kT>
void QuantizeWith(const void* x, const Codebook4& cb, const Search4& search, const Blockwise4Range& r,
                  uint8_t* packed, float* absmax) {
  const DF df;
  const int64_t N = static_cast<int64_t>(kN);
  const bool identity = PositionsAreCodes(cb);
  HWY_ALIGN uint8_t to_code[16];
  std::copy(cb.sorted_to_code.begin(), cb.sorted_to_code.end(), to_code);
  // The sorted positions of a run of consecutive blocks (at most kMaxBlocksize elements), mapped to codes and
  // packed when the run is complete: bfloat16 blocks coded by table have their lookups done a run at a time
  // (Bf16TableRun). Their tables hold positions too. Tables are valid where the code, not the position, stops
  // changing (FP4's midpoint between -0 and +0 changes only the position): every position a table's last row
  // stands for maps to the same code.
  HWY_ALIGN uint8_t pos[kMaxBlocksize];
  Bf16TableRunFor<kT> tables;
  const bool use_tables = kN < 8 || r.blocksize >= kBf16TablesFrom;
  int64_t run_lo = r.block_begin * r.blocksize, run_len = 0;
  const auto pack_run = [&] {
    tables.Finish();
    PackCodes4(pos, run_len, identity ? nullptr : to_code, packed + run_lo / 2);  // run_lo: a block start, even
    run_lo += run_len;
    run_len = 0;
  };

  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const int64_t vec_end = lo + (hi - lo) / N * N;
    if (run_len + (hi - lo) > kMaxBlocksize) pack_run();
    uint8_t* c = pos + run_len;  // element lo's position
    run_len += hi - lo;

    const float amax = BlockAbsmax<kT>(x, lo, hi);
    absmax[b] = amax;
    const bool prefetch = b + 1 < r.block_end;

    if constexpr (kT == DType::kBFloat16) {
      const auto fill = [&cb](float a, const float* v, int64_t n, uint8_t* out) {
        for (int64_t k = 0; k < n; ++k) out[k] = static_cast<uint8_t>(SortedPosition4(cb, v[k] / a));
      };
      // pack_run has ended the run before a block that would not fit, so TryAdd never finishes it early.
      if (use_tables && tables.TryAdd(cb.bf16_codes.get(), fill, static_cast<const uint16_t*>(x), lo, hi, amax,
                                      prefetch, c)) {
        continue;
      }
    }
    // x / absmax is a true division, as ScaleToUnit's.
    int64_t i = lo;
    if (std::isfinite(amax) && amax != 0.0f) {
      const VF vscale = hn::Set(df, amax);
      // The next block's absmax pass then reads from cache while this loop computes.
      for (; i < vec_end; i += N) {
        if (prefetch && (i & 15) == 0) PrefetchElements<kT>(x, i + StreamAhead<kT>(r.blocksize), 16);
        StorePositions(search.Position(hn::Div(LoadF32<kT>(x, i), vscale)), c + (i - lo));
      }
    }
    for (; i < hi; ++i) c[i - lo] = static_cast<uint8_t>(SortedPosition4(cb, ScaleToUnit(LoadAsFloat(kT, x, i), amax)));
  }
  pack_run();
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// Elements [lo, end) (whole runs of 32) coded and packed in registers by pack32(i) (the 16 bytes of elements
// i .. i + 31); `ahead` > 0: also prefetch the elements that many on.
template <DType kT, class Pack32>
HWY_INLINE void PackRuns(const void* x, int64_t lo, int64_t end, int64_t ahead, const Pack32& pack32,
                         uint8_t* packed) {
  for (int64_t i = lo; i < end; i += 32) {
    if (ahead > 0) PrefetchElements<kT>(x, i + ahead, 32);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + i / 2), pack32(i));
  }
}

// Blocks [r.block_begin, r.block_end) with each block's whole runs of 32 elements coded and packed in registers by
// runs(lo, end, amax, ahead) (PackRuns' arguments, amax the block's absmax, finite and not 0), where QuantizeWith
// stores every position and packs them in a pass of their own; the rest by the scalar definition.
template <DType kT, class Runs>
HWY_INLINE void QuantizePacked32(const void* x, const Codebook4& cb, const Blockwise4Range& r, const Runs& runs,
                                 uint8_t* packed, float* absmax) {
  const auto code_at = [&](int64_t i, float amax) {
    return NearestCode4(cb, ScaleToUnit(LoadAsFloat(kT, x, i), amax));
  };
  BlockAbsmaxes<kT> absmaxes(x, r);
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    bool in_l1;
    const float amax = absmaxes.Of(b, in_l1);
    absmax[b] = amax;
    int64_t i = lo;
    if (std::isfinite(amax) && amax != 0.0f) {
      i = lo + (hi - lo) / 32 * 32;
      runs(lo, i, amax, !in_l1 && b + 1 < r.block_end ? StreamAhead<kT>(r.blocksize) : 0);
    }
    for (; i + 1 < hi; i += 2) packed[i / 2] = static_cast<uint8_t>((code_at(i, amax) << 4) | code_at(i + 1, amax));
    if (i < hi) packed[i / 2] = static_cast<uint8_t>(code_at(i, amax) << 4);  // an odd n's last: PadOddEnd4's nibble
  }
}

// QuantizePacked32's runs for pack32(i, scale), scale the absmax in every lane (x / absmax is a true division, as
// ScaleToUnit's).
template <DType kT, class Pack32>
HWY_INLINE auto ScaledRuns(const void* x, const Pack32& pack32, uint8_t* packed) {
  return [x, &pack32, packed](int64_t lo, int64_t end, float amax, int64_t ahead) HWY_ATTR {
    const VF scale = hn::Set(DF(), amax);
    PackRuns<kT>(x, lo, end, ahead, [&](int64_t i) HWY_ATTR { return pack32(i, scale); }, packed);
  };
}
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 16-bit blocks (bfloat16, float16) by their bits alone, no division. With the block's absmax a (bits A, finite, not
// 0) and an element's magnitude bits m, let r = max(m - (A - kSpan), 0). While a and x are normal numbers, x / a
// depends only on their mantissas and the difference of their exponents, so given a's mantissa, r and x's sign
// determine x's code; below the span, |x| <= a / 32 (kSpan is 5 binades), takes the code of 0 (checked). Per
// mantissa, a table of 64 16-bit entries indexed by r >> kShift (buckets of a quarter binade, 21 of them) plus 32 for
// a negative x: bits 0-3 the bucket's code up to its split, 4-7 the code above it, the top kShift bits the last
// offset in the bucket that takes the first (all ones: the bucket holds no split). Built by the scalar definition
// (each split found by a walk from its midpoint's place); a codebook whose buckets would hold two splits, or whose
// code at r = 0 is not that of 0, gets none (FP4: its lowest split, 0.0026, lies below the span; NF4's splits are
// 0.36 binades apart or more).
// Figures: tools/bench/NOTES.md, '4-bit quantize: bfloat16 by its bits'.
template <DType kT>
class KeyPlan {
 public:
  static_assert(kT == DType::kBFloat16 || kT == DType::kFloat16);
  static constexpr int kMantissaBits = kT == DType::kBFloat16 ? 7 : 10;
  static constexpr int kMantissas = 1 << kMantissaBits;
  static constexpr int kShift = kMantissaBits - 2, kSpan = 5 << kMantissaBits;
  // From this absmax on, every element above the span is a normal number (the smallest normal's bits are
  // 1 << kMantissaBits).
  static constexpr int kMinAbsmaxBits = (1 << kMantissaBits) + kSpan;

  // For PlanFor: false where the codebook's buckets do not serve absmax mantissa 0 (FP4's serve none).
  bool Make(const Codebook4& cb) {
    cb_ = &cb;
    for (auto& table : tables_) table.store(Unmade(), std::memory_order_relaxed);
    return Table(0) != nullptr;
  }

  // The table of absmax bits `bits` (of its mantissa), made at its first use (the first call of a process needs
  // only the mantissas its blocks have: 1024 tables for float16 take milliseconds); null where the buckets do not
  // serve that mantissa. Thread-safe.
  const uint16_t* Table(int bits) const {
    const int ma = bits & (kMantissas - 1);
    const uint16_t* table = tables_[ma].load(std::memory_order_acquire);
    if (HWY_UNLIKELY(table == Unmade())) table = Made(ma);
    return table;
  }

 private:
  static constexpr int kOne = kT == DType::kBFloat16 ? 0x3F80 : 0x3C00;  // the bits of 1.0

  // tables_[ma] before Made(ma): the address of the first entry past every table, never a table's.
  const uint16_t* Unmade() const { return entries_[kMantissas - 1] + 64; }

  HWY_NOINLINE const uint16_t* Made(int ma) const {
    std::lock_guard<std::mutex> lock(mu_);
    const uint16_t* table = tables_[ma].load(std::memory_order_relaxed);
    if (table == Unmade()) {
      table = Fill(ma) ? entries_[ma] : nullptr;
      tables_[ma].store(table, std::memory_order_release);
    }
    return table;
  }

  bool Fill(int ma) const {
    const auto as_float = [](uint16_t bits) { return LoadAsFloat(kT, &bits, 0); };
    constexpr int kNone = (1 << kShift) - 1;
    const Codebook4& cb = *cb_;
    const int bits_a = kOne | ma;  // exponent 0: any other exponent of a normal a gives the same codes
    const float a = as_float(static_cast<uint16_t>(bits_a));
    for (int sign = 0; sign < 2; ++sign) {
      // Sorted positions are monotonic in r (in x), so a bucket whose ends are one apart holds one split: near the
      // r of the midpoint between the two positions times a (rounded to kT), found from there by a walk (a step or
      // two; the walk alone decides, so the estimate needs no exactness).
      const auto pos = [&](int r) {
        const float x = as_float(static_cast<uint16_t>((bits_a - kSpan + r) | (sign << 15)));
        return SortedPosition4(cb, ScaleToUnit(x, a));
      };
      const auto r_of = [&](float magnitude) {
        const uint16_t bits = kT == DType::kBFloat16 ? FloatToBF16(magnitude) : FloatToHalf(magnitude);
        return (bits & 0x7FFF) - (bits_a - kSpan);
      };
      if (pos(0) != SortedPosition4(cb, ScaleToUnit(sign ? -0.0f : 0.0f, a))) return false;
      for (int b = 0; b < 32; ++b) {
        const int lo = b << kShift, hi = std::min(lo + kNone, kSpan);
        int low = 0, high = 0, last = kNone;
        if (lo <= kSpan) {
          low = pos(lo), high = pos(hi);
          if (std::abs(high - low) > 1) return false;  // two splits in the bucket
          if (high != low) {
            // The first r taking `high` lies in (lo, hi]: pos(lo) == low, pos(hi) == high.
            int r = std::clamp(r_of(std::fabs(cb.midpoints[std::min(low, high)]) * a), lo + 1, hi);
            while (pos(r) == low) ++r;
            while (r - 1 > lo && pos(r - 1) != low) --r;
            last = r - 1 - lo;
          }
          low = cb.sorted_to_code[low], high = cb.sorted_to_code[high];
        }
        entries_[ma][32 * sign + b] = static_cast<uint16_t>(last << (16 - kShift) | high << 4 | low);
      }
    }
    return true;
  }

  const Codebook4* cb_ = nullptr;
  mutable std::mutex mu_;
  HWY_ALIGN mutable uint16_t entries_[kMantissas][64];
  // Each mantissa's table: Unmade(), entries_[ma] once made, or null where its buckets do not serve.
  mutable std::atomic<const uint16_t*> tables_[kMantissas];
};

// float16 blocks take keys from this size on. On Zen 4 (L2 1 MB, a cheap division) 1024 tables (128 KB) did not stay
// in the caches beside input streamed from memory, and smaller blocks paid more for their table's miss than the keys
// saved; on Sapphire / Emerald Rapids (L2 2 MB, the division dearer) keys win from blocksize 64 (figures:
// tools/bench/NOTES.md, '4-bit quantize: bfloat16 by its bits', 'float16 by keys on Intel'). bfloat16's 128 tables
// (16 KB) stay everywhere. By vendor (tuning, as gemv4_x86.cc's prefetch hint), read once at load.
const int64_t kFloat16KeysFrom = CpuIsIntel() ? 64 : 512;

// The bits of a block's absmax: a value of kT (bfloat16 or float16) widened to float32.
template <DType kT>
HWY_INLINE int AbsmaxBits(float amax) {
  if constexpr (kT == DType::kBFloat16) {
    uint32_t bits;
    std::memcpy(&bits, &amax, 4);
    return static_cast<int>(bits >> 16);
  } else {
    return _cvtss_sh(amax, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // exact
  }
}

// 32 16-bit elements at x into 16 bytes of codes, even element high, by the table of their block (e0: entries 0-31,
// e1: 32-63) and base = its A - kSpan in every 16-bit lane: in 16-bit lanes r (a saturating subtraction), the entry
// (one two-register permute, the sign as index bit 5), r's offset in the bucket against the entry's (both in the top
// kShift bits), the code shifted in where above; then each 32-bit lane's even and odd code into one byte.
template <int kShift>
HWY_INLINE __m128i PackByKeys(const uint16_t* x, __m512i e0, __m512i e1, __m512i base) {
  const __m512i w = _mm512_loadu_si512(x);
  const __m512i r = _mm512_subs_epu16(_mm512_and_si512(w, _mm512_set1_epi16(0x7FFF)), base);
  // bucket | (sign bit of w, moved to bit 5): ternary logic A | (B & C)
  const __m512i idx = _mm512_ternarylogic_epi32(_mm512_srli_epi16(r, kShift), _mm512_srli_epi16(w, 10),
                                                _mm512_set1_epi16(0x20), 0xF8);
  const __m512i entry = _mm512_permutex2var_epi16(e0, idx, e1);
  const __mmask32 above = _mm512_cmpgt_epu16_mask(_mm512_slli_epi16(r, 16 - kShift), entry);
  const __m512i code = _mm512_mask_srli_epi16(entry, above, entry, 4);  // the low nibble; above it, bits to drop
  // Per 32-bit lane: (even code << 4) from the first, the odd code from the second (select by C: (A & C) | (B & ~C)).
  const __m512i pairs = _mm512_ternarylogic_epi32(_mm512_slli_epi32(code, 4), _mm512_srli_epi32(code, 16),
                                                  _mm512_set1_epi32(0xF0), 0xE4);
  return _mm512_cvtepi32_epi8(pairs);
}

// Blocks [r.block_begin, r.block_end) by Bucket4, 32 elements into 16 bytes of codes in registers, even element high
// (bitsandbytes' order):
// - bfloat16: the two halves of each 32-bit lane are an even and an odd element, whose codes pair up lane by lane
//   (even << 4 | odd), narrowed by one vpmovdb;
// - float32 and float16: the two vectors' positions packed to 16 bits (vpackusdw, which interleaves 64-bit pieces of
//   the two), mapped to codes there (one vpermw, FP4 only), each adjacent pair summed as 16 * even + odd (vpmaddwd),
//   narrowed, and the pairs' order restored by one byte shuffle.
// Figures: tools/bench/NOTES.md, '4-bit quantize: codes packed in registers'.
// 16-bit blocks take keys (PackByKeys) instead where `keys` is given and their absmax is large enough.
template <DType kT, bool kTwo, class Keys>
void QuantizeByBuckets(const void* x, const Codebook4& cb, const Bucket4<kTwo>& search, const Keys* keys,
                       const Blockwise4Range& r, uint8_t* packed, float* absmax) {
  const bool identity = PositionsAreCodes(cb);
  HWY_ALIGN int32_t to_code[16];
  HWY_ALIGN int16_t to_code16[32] = {};
  for (int k = 0; k < kCodebook4Size; ++k) to_code16[k] = static_cast<int16_t>(to_code[k] = cb.sorted_to_code[k]);
  const __m512i code_table = _mm512_load_si512(to_code), code_table16 = _mm512_load_si512(to_code16);
  const __m512i high_half = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  const auto positions = [&](__m512 v, VF scale) { return search.Position(VF{_mm512_div_ps(v, scale.raw)}).raw; };
  const auto pack32 = [&](int64_t i, VF scale) HWY_ATTR {
    if constexpr (kT == DType::kBFloat16) {
      const __m512i w = _mm512_loadu_si512(static_cast<const uint16_t*>(x) + i);
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(w, high_half));
      __m512i pe = positions(even, scale), po = positions(odd, scale);
      if (!identity) pe = _mm512_permutexvar_epi32(pe, code_table), po = _mm512_permutexvar_epi32(po, code_table);
      return _mm512_cvtepi32_epi8(_mm512_or_si512(_mm512_slli_epi32(pe, 4), po));
    } else {
      // Words per 128-bit quarter q: elements 4q .. 4q + 3, then 16 + 4q .. 19 + 4q; so dword k of the sums holds
      // pair 2q, 2q + 1, 8 + 2q, 9 + 2q for k = 4q .. 4q + 3.
      __m512i words = _mm512_packus_epi32(positions(LoadF32<kT>(x, i).raw, scale),
                                          positions(LoadF32<kT>(x, i + 16).raw, scale));
      if (!identity) words = _mm512_permutexvar_epi16(words, code_table16);
      const __m512i pairs = _mm512_madd_epi16(words, _mm512_set1_epi32(0x00010010));  // 16 * even + odd
      return _mm_shuffle_epi8(_mm512_cvtepi32_epi8(pairs),
                              _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    }
  };
  const auto scaled_runs = ScaledRuns<kT>(x, pack32, packed);
  if constexpr (kT == DType::kBFloat16 || kT == DType::kFloat16) {
    if (keys != nullptr) {
      const auto* x16 = static_cast<const uint16_t*>(x);
      const auto runs = [&](int64_t lo, int64_t end, float amax, int64_t ahead) HWY_ATTR {
        const int bits = AbsmaxBits<kT>(amax);
        const uint16_t* entries = bits >= Keys::kMinAbsmaxBits ? keys->Table(bits) : nullptr;
        if (entries == nullptr) return scaled_runs(lo, end, amax, ahead);
        const __m512i e0 = _mm512_load_si512(entries), e1 = _mm512_load_si512(entries + 32);
        const __m512i base = _mm512_set1_epi16(static_cast<int16_t>(bits - Keys::kSpan));
        PackRuns<kT>(x, lo, end, ahead,
                     [&](int64_t i) HWY_ATTR { return PackByKeys<Keys::kShift>(x16 + i, e0, e1, base); }, packed);
      };
      return QuantizePacked32<kT>(x, cb, r, runs, packed, absmax);
    }
  }
  QuantizePacked32<kT>(x, cb, r, scaled_runs, packed, absmax);
}
#endif

#if HWY_TARGET == HWY_AVX2
// Blocks [r.block_begin, r.block_end) by Search4 on AVX2, 32 elements (four vectors) into 16 bytes of codes in
// registers: positions packed to 16 bits (vpackusdw, which interleaves 64-bit pieces of each pair of vectors), mapped
// to codes there (a byte shuffle, FP4 only), each adjacent pair summed as 16 * even + odd (vpmaddwd), narrowed, and
// the pairs' order restored by a qword permute and a byte shuffle. Figures: tools/bench/NOTES.md, '4-bit quantize:
// codes packed in registers'.
template <DType kT>
void QuantizeSearchPacked(const void* x, const Codebook4& cb, const Search4& search, const Blockwise4Range& r,
                          uint8_t* packed, float* absmax) {
  const bool identity = PositionsAreCodes(cb);
  HWY_ALIGN uint8_t to_code[32];  // the map in both 128-bit lanes
  for (int k = 0; k < kCodebook4Size; ++k) to_code[k] = to_code[16 + k] = cb.sorted_to_code[k];
  const __m256i code_table = _mm256_load_si256(reinterpret_cast<const __m256i*>(to_code));
  const auto pack32 = [&](int64_t i, VF scale) HWY_ATTR {
    const auto words = [&](int64_t j) HWY_ATTR {
      const __m256i p0 = search.Position(hn::Div(LoadF32<kT>(x, j), scale)).raw;
      const __m256i p1 = search.Position(hn::Div(LoadF32<kT>(x, j + 8), scale)).raw;
      const __m256i w = _mm256_packus_epi32(p0, p1);  // per 128-bit lane: 4 of p0's, then 4 of p1's
      return identity ? w : _mm256_and_si256(_mm256_shuffle_epi8(code_table, w), _mm256_set1_epi16(0xFF));
    };
    const __m256i mult = _mm256_set1_epi32(0x00010010);  // 16 * even + odd
    // Lanes (pairs): 0, 1, 4, 5, 8, 9, 12, 13 | 2, 3, 6, 7, 10, 11, 14, 15.
    const __m256i w = _mm256_packus_epi32(_mm256_madd_epi16(words(i), mult), _mm256_madd_epi16(words(i + 16), mult));
    const __m256i b = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    return _mm_shuffle_epi8(_mm256_castsi256_si128(b),
                            _mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15));
  };
  QuantizePacked32<kT>(x, cb, r, ScaledRuns<kT>(x, pack32, packed), packed, absmax);
}
#endif

template <DType kT>
void QuantizeT(const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed, float* absmax) {
  const Codebook4& cb = GetCodebook4(q);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (const Bucket4Plan* plan = PlanFor<Bucket4Plan>(q)) {
    const auto by_buckets = [&](const auto* keys) {
      if (plan->two) return QuantizeByBuckets<kT>(x, cb, Bucket4<true>(*plan), keys, r, packed, absmax);
      return QuantizeByBuckets<kT>(x, cb, Bucket4<false>(*plan), keys, r, packed, absmax);
    };
    if constexpr (kT == DType::kBFloat16 || kT == DType::kFloat16) {
      const bool keyed = kT == DType::kBFloat16 || r.blocksize >= kFloat16KeysFrom;
      return by_buckets(keyed ? PlanFor<KeyPlan<kT>>(q) : nullptr);
    } else {
      return by_buckets(static_cast<const std::nullptr_t*>(nullptr));
    }
  }
#elif HWY_TARGET == HWY_AVX2
  if (kT != DType::kBFloat16 || r.blocksize < kBf16TablesFrom) {  // else QuantizeWith's tables
    return QuantizeSearchPacked<kT>(x, cb, Search4(cb), r, packed, absmax);
  }
#endif
  QuantizeWith<kT>(x, cb, Search4(cb), r, packed, absmax);
}

// Elements [lo, hi) in chunks of 32 (16 packed bytes); returns where the chunks end. A block has only 16 distinct
// outputs: `scaled` stored as kT once by StoreF32 (so bit for bit what the per-element path stores), then split
// into one 16-byte table per output byte. Each element is then one byte lookup per output byte (pshufb), and
// interleaving the byte planes lays the outputs out in order: no per-element lookup of 16 floats, multiply or
// rounding (figures: tools/bench/NOTES.md, '4-bit dequantize by byte planes'). Outputs of 2 or 4 bytes.
// kStream: StreamableOutput holds for the whole output (lo is a multiple of 32 elements, so every 16-byte store is
// aligned). The caller ends with hwy::FlushStream().
template <DType kT, bool kStream>
HWY_INLINE int64_t DequantizeByBytePlanes(const uint8_t* packed, const RegTable<16>& scaled, int64_t lo,
                                          int64_t hi, void* out) {
  constexpr int kBytes = static_cast<int>(DTypeSize(kT));
  const hn::Full128<uint8_t> d8;
  const hn::Full128<uint16_t> d16;
  const hn::Full128<uint32_t> d32;
  const hn::Full128<uint64_t> d64;
  HWY_ALIGN uint8_t outputs[16 * kBytes];
  for (size_t k = 0; k < RegTable<16>::kRegs; ++k) StoreF32<kT>(scaled.reg[k], outputs, static_cast<int64_t>(k * kN));
  // Byte planes by shuffles: byte k of every output (little-endian) into table[k].
  hn::Vec<decltype(d8)> table[kBytes];
  if constexpr (kBytes == 2) {
    HWY_ALIGN static constexpr uint8_t kSplit[16] = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};
    const auto split = hn::Load(d8, kSplit);
    const auto a = hn::BitCast(d64, hn::TableLookupBytes(hn::Load(d8, outputs), split));
    const auto b = hn::BitCast(d64, hn::TableLookupBytes(hn::Load(d8, outputs + 16), split));
    table[0] = hn::BitCast(d8, hn::InterleaveLower(d64, a, b));
    table[1] = hn::BitCast(d8, hn::InterleaveUpper(d64, a, b));
  } else {
    HWY_ALIGN static constexpr uint8_t kSplit[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    const auto split = hn::Load(d8, kSplit);
    hn::Vec<decltype(d32)> a[4];  // a[j] lane k: byte k of outputs 4j .. 4j + 3
    for (int j = 0; j < 4; ++j) a[j] = hn::BitCast(d32, hn::TableLookupBytes(hn::Load(d8, outputs + 16 * j), split));
    const auto t0 = hn::BitCast(d64, hn::InterleaveLower(d32, a[0], a[1]));
    const auto t1 = hn::BitCast(d64, hn::InterleaveLower(d32, a[2], a[3]));
    const auto t2 = hn::BitCast(d64, hn::InterleaveUpper(d32, a[0], a[1]));
    const auto t3 = hn::BitCast(d64, hn::InterleaveUpper(d32, a[2], a[3]));
    table[0] = hn::BitCast(d8, hn::InterleaveLower(d64, t0, t1));
    table[1] = hn::BitCast(d8, hn::InterleaveUpper(d64, t0, t1));
    table[2] = hn::BitCast(d8, hn::InterleaveLower(d64, t2, t3));
    table[3] = hn::BitCast(d8, hn::InterleaveUpper(d64, t2, t3));
  }
  uint8_t* o = static_cast<uint8_t*>(out);
  const auto store = [&](auto v, int64_t element) {
    const auto bytes = hn::BitCast(d8, v);
    if constexpr (kStream) {
      hn::Stream(bytes, d8, o + element * kBytes);
    } else {
      hn::StoreU(bytes, d8, o + element * kBytes);
    }
  };
  // 16 codes (elements e .. e + 15) to 16 outputs.
  const auto outputs16 = [&](hn::Vec<decltype(d8)> codes, int64_t e) {
    const auto b0 = hn::TableLookupBytes(table[0], codes);
    const auto b1 = hn::TableLookupBytes(table[1], codes);
    if constexpr (kBytes == 2) {
      store(hn::ZipLower(d16, b0, b1), e);
      store(hn::ZipUpper(d16, b0, b1), e + 8);
    } else {
      const auto b2 = hn::TableLookupBytes(table[2], codes);
      const auto b3 = hn::TableLookupBytes(table[3], codes);
      const auto low0 = hn::ZipLower(d16, b0, b1), low1 = hn::ZipUpper(d16, b0, b1);
      const auto high0 = hn::ZipLower(d16, b2, b3), high1 = hn::ZipUpper(d16, b2, b3);
      store(hn::ZipLower(d32, low0, high0), e);
      store(hn::ZipUpper(d32, low0, high0), e + 4);
      store(hn::ZipLower(d32, low1, high1), e + 8);
      store(hn::ZipUpper(d32, low1, high1), e + 12);
    }
  };
  int64_t i = lo;
  for (; i + 32 <= hi; i += 32) {
    const auto bytes = hn::LoadU(d8, packed + i / 2);
    const auto first = hn::ShiftRight<4>(bytes);  // each byte's first element is its high nibble
    const auto second = hn::And(bytes, hn::Set(d8, 0x0F));
    outputs16(hn::InterleaveLower(d8, first, second), i);
    outputs16(hn::InterleaveUpper(d8, first, second), i + 16);
  }
  return i;
}

// 16-bit outputs, and float32 ones where a vector holds 4 floats (the 16-entry lookup then takes 4 registers),
// go by byte planes; float32 on wider vectors keeps the per-element lookup, as fast or faster there (figures:
// tools/bench/NOTES.md, '4-bit dequantize by byte planes'). Outputs StreamableOutput takes stream, float32 too:
// no faster on Zen 3, 2.2x on Sapphire / Emerald Rapids (tools/bench/NOTES.md, 'Streaming stores').
template <DType kT>
void DequantizeT(const uint8_t* packed, const float* absmax, const float* code16, const Blockwise4Range& r,
                 void* out) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(kN);
  const RegTable<16> values = RegTable<16>::FromArray(code16);
  // A chunk of 2N elements is N bytes: lane k of the first half takes byte k / 2, of the second half byte
  // N / 2 + k / 2; even lanes take the high nibble.
  HWY_ALIGN int32_t spread[2 * kN];
  HWY_ALIGN int32_t odd_lanes[kN];
  for (size_t k = 0; k < 2 * kN; ++k) spread[k] = static_cast<int32_t>(k / 2);
  for (size_t k = 0; k < kN; ++k) odd_lanes[k] = (k & 1) ? -1 : 0;
  const auto spread_lo = hn::IndicesFromVec(di, hn::Load(di, spread));
  const auto spread_hi = hn::IndicesFromVec(di, hn::Load(di, spread + kN));
  const auto odd = hn::MaskFromVec(hn::Load(di, odd_lanes));
  const VI nibble = hn::Set(di, 0x0F);
  constexpr bool kBytePlanes = kT != DType::kFloat32 || kN <= 4;
  const bool stream = StreamableOutput(out, r.n * DTypeSize(kT) + (r.n + 1) / 2);

  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const int64_t vec_end = lo + (hi - lo) / (2 * N) * (2 * N);
    // code16[c] * absmax is the same float product whether taken before or after the lookup.
    RegTable<16> scaled;
    const VF scale = hn::Set(df, absmax[b]);
    for (size_t k = 0; k < RegTable<16>::kRegs; ++k) scaled.reg[k] = hn::Mul(values.reg[k], scale);
    int64_t i = lo;
    if constexpr (kBytePlanes) {
      i = stream ? DequantizeByBytePlanes<kT, true>(packed, scaled, lo, hi, out)
                 : DequantizeByBytePlanes<kT, false>(packed, scaled, lo, hi, out);
    }
    // no_nan (a std::bool_constant): the block's absmax is finite, so no product is NaN (code values are finite);
    // streamed: the outputs stream (StoreF32's kStream).
    const auto vectors = [&](auto no_nan, auto streamed) {
      for (; i < vec_end; i += 2 * N) {
        const VI bytes = hn::PromoteTo(di, hn::LoadU(DU8(), packed + i / 2));
        const VI e0 = hn::TableLookupLanes(bytes, spread_lo);
        const VI e1 = hn::TableLookupLanes(bytes, spread_hi);
        const VI c0 = hn::And(hn::IfThenElse(odd, e0, hn::ShiftRight<4>(e0)), nibble);
        const VI c1 = hn::And(hn::IfThenElse(odd, e1, hn::ShiftRight<4>(e1)), nibble);
        StoreF32<kT, decltype(no_nan)::value, decltype(streamed)::value>(scaled.Lookup(c0), out, i);
        StoreF32<kT, decltype(no_nan)::value, decltype(streamed)::value>(scaled.Lookup(c1), out, i + N);
      }
    };
    // Only float32 outputs stream here; the byte planes have done the rest's vectors.
    const bool finite = std::isfinite(absmax[b]);
    if (kT == DType::kFloat32 && stream) {
      finite ? vectors(std::true_type{}, std::true_type{}) : vectors(std::false_type{}, std::true_type{});
    } else {
      finite ? vectors(std::true_type{}, std::false_type{}) : vectors(std::false_type{}, std::false_type{});
    }
    for (; i < hi; ++i) StoreFromFloat(kT, out, i, code16[PackedCode4(packed, i)] * absmax[b]);
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

void Quantize4(DType dtype, const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed, float* absmax) {
  switch (dtype) {
    case DType::kFloat32: return QuantizeT<DType::kFloat32>(x, q, r, packed, absmax);
    case DType::kFloat16: return QuantizeT<DType::kFloat16>(x, q, r, packed, absmax);
    case DType::kBFloat16: return QuantizeT<DType::kBFloat16>(x, q, r, packed, absmax);
  }
}

void Dequantize4(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                const Blockwise4Range& r, void* out) {
  switch (dtype) {
    case DType::kFloat32: return DequantizeT<DType::kFloat32>(packed, absmax, code16, r, out);
    case DType::kFloat16: return DequantizeT<DType::kFloat16>(packed, absmax, code16, r, out);
    case DType::kBFloat16: return DequantizeT<DType::kBFloat16>(packed, absmax, code16, r, out);
  }
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(Quantize4);
HWY_EXPORT(Dequantize4);

void QuantizeBlockwise4(DType dtype, const void* x, Quant4 q, const Blockwise4Range& r, uint8_t* packed,
                        float* absmax) {
  HWY_DYNAMIC_DISPATCH(Quantize4)(dtype, x, q, r, packed, absmax);
  PadOddEnd4(q, r, packed);
}

void DequantizeBlockwise4(DType dtype, const uint8_t* packed, const float* absmax, const float* code16,
                          const Blockwise4Range& r, void* out) {
  if (blockwise4_x86::Dequantize16(dtype, packed, absmax, code16, r, out)) return;
  HWY_DYNAMIC_DISPATCH(Dequantize4)(dtype, packed, absmax, code16, r, out);
}

}  // namespace bnb::core
#endif  // HWY_ONCE
