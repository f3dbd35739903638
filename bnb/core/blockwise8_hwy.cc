// Vectorized blockwise 8-bit kernels, compiled once per instruction set by Highway and picked at run time.
// Every per-element rule (scaling, nearest code, rounding) is the scalar one of blockwise8.h / codebook.h; blocks
// whose absmax is 0, inf or NaN, and vector tails, take the scalar code path directly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "bnb/core/blockwise8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/blockwise8_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Codes of N scaled values in [-1, 1], by PreparedCodebook's bucket table: one gather and integer compares.
// Codebooks whose table has buckets marked for search (never the dynamic map) check for them and redo those
// vectors with the scalar binary search.
struct BucketCoder {
  static constexpr bool kDefersRedo = false;
  const PreparedCodebook& cb;

  HWY_INLINE void Store(VF v, uint8_t* out) const {
    using P = PreparedCodebook;
    const DI di;
    const DU32 du32;
    const auto bits = hn::BitCast(du32, v);
    const auto bucket = hn::BitCast(di, hn::ShiftRight<P::kBucketShift>(bits));  // logical: the sign lands on bit 16
    const auto key = hn::BitCast(di, hn::And(bits, hn::Set(du32, P::kKeyMask)));
    const auto e = hn::GatherIndex(di, cb.buckets.data(), bucket);
    const auto byte = hn::Set(di, 0xFF);  // the shifts are arithmetic: mask off the sign
    const auto threshold = hn::And(e, hn::Set(di, 0xFFFF));
    const auto high = hn::Gt(key, hn::Sub(threshold, hn::Set(di, 1)));  // key >= threshold
    const auto code = hn::IfThenElse(high, hn::And(hn::ShiftRight<24>(e), byte), hn::And(hn::ShiftRight<16>(e), byte));
    hn::StoreU(hn::DemoteTo(DU8(), code), DU8(), out);
    if (HWY_UNLIKELY(cb.needs_search) && !hn::AllFalse(di, hn::Eq(threshold, hn::Set(di, P::kSearch)))) {
      Redo(cb, v, out);
    }
  }

  HWY_INLINE void Store4(VF v0, VF v1, VF v2, VF v3, uint8_t* out) const {
    const size_t N = hn::Lanes(DF());
    Store(v0, out);
    Store(v1, out + N);
    Store(v2, out + 2 * N);
    Store(v3, out + 3 * N);
  }

  static HWY_NOINLINE void Redo(const PreparedCodebook& cb, VF v, uint8_t* out) {
    HWY_ALIGN float vs[hn::MaxLanes(DF())];
    hn::Store(v, DF(), vs);
    for (size_t j = 0; j < hn::Lanes(DF()); ++j) out[j] = NearestCode(cb, vs[j]);
  }
};

#if HWY_TARGET != HWY_SCALAR
// Four vectors of int32 codes as bytes, lanes in order, values below 0 saturating to 0.
HWY_INLINE void StoreBytes4(VI c0, VI c1, VI c2, VI c3, uint8_t* out) {
#if HWY_TARGET == HWY_AVX2
  // Two saturating packs leave the 4-byte groups interleaved by 128-bit half; one permute orders them.
  const __m256i c01 = _mm256_packs_epi32(c0.raw, c1.raw);
  const __m256i c23 = _mm256_packs_epi32(c2.raw, c3.raw);
  const __m256i bytes = _mm256_packus_epi16(c01, c23);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(bytes, order));
#else
  const DU8 du8;
  const size_t N = hn::Lanes(DF());
  hn::StoreU(hn::DemoteTo(du8, c0), du8, out);
  hn::StoreU(hn::DemoteTo(du8, c1), du8, out + N);
  hn::StoreU(hn::DemoteTo(du8, c2), du8, out + 2 * N);
  hn::StoreU(hn::DemoteTo(du8, c3), du8, out + 3 * N);
#endif
}

// The store of a coder whose Codes(v, &flagged) may flag lanes it cannot trust: each vector with a flagged lane is
// then stored again by `exact`, a coder that takes any value.
template <class Coder, class Exact>
HWY_INLINE void StoreOrRedo(const Coder& coder, const Exact& exact, VF v, uint8_t* out) {
  hn::Mask<DF> flagged;
  hn::StoreU(hn::DemoteTo(DU8(), coder.Codes(v, &flagged)), DU8(), out);
  if (HWY_UNLIKELY(!hn::AllFalse(DF(), flagged))) exact.Store(v, out);
}

template <class Coder, class Exact>
HWY_INLINE void StoreOrRedo4(const Coder& coder, const Exact& exact, VF v0, VF v1, VF v2, VF v3, uint8_t* out) {
  hn::Mask<DF> f0, f1, f2, f3;
  const VI c0 = coder.Codes(v0, &f0), c1 = coder.Codes(v1, &f1), c2 = coder.Codes(v2, &f2), c3 = coder.Codes(v3, &f3);
  StoreBytes4(c0, c1, c2, c3, out);
  const size_t N = hn::Lanes(DF());
  if (HWY_UNLIKELY(!hn::AllFalse(DF(), hn::Or(hn::Or(f0, f1), hn::Or(f2, f3))))) {
    if (!hn::AllFalse(DF(), f0)) exact.Store(v0, out);
    if (!hn::AllFalse(DF(), f1)) exact.Store(v1, out + N);
    if (!hn::AllFalse(DF(), f2)) exact.Store(v2, out + 2 * N);
    if (!hn::AllFalse(DF(), f3)) exact.Store(v3, out + 3 * N);
  }
}

// The last steps of SegmentSearch's rule once a lane has its segment's coefficients: the code as an int32 in
// [-128, 255] (negative ones stand for 0: the narrowing saturates), and in *flagged the lanes whose rounding is too
// close to a midpoint to trust.
struct SegmentFinish {
  VF zero_biased, margin_limit;
  static constexpr float kBias = 12582912.0f;  // 1.5 * 2^23
  static constexpr int32_t kBiasBits = 0x4B400000;

  explicit SegmentFinish(const SegmentSearch& s)
      : zero_biased(hn::Set(DF(), kBias + static_cast<float>(s.zero))), margin_limit(hn::Set(DF(), 0.5f - s.margin)) {}

  // m: the magnitude (nudged as SegmentSearch says); sign: the value's sign bit; nonzero: lanes above zero_limit,
  // or null when the caller flags the others.
  HWY_INLINE VI Codes(VF m, VI sign, VF scale, VF offset, VF last, const hn::Mask<DF>* nonzero,
                      hn::Mask<DF>* flagged) const {
    const DF df;
    const DI di;
    const VF t = hn::MulSub(m, scale, offset);
    const VF r = hn::Round(t);
    *flagged = hn::Gt(hn::Abs(hn::Sub(t, r)), margin_limit);
    const VF q = nonzero == nullptr ? hn::Min(r, last) : hn::IfThenElseZero(*nonzero, hn::Min(r, last));
    // The code as a float plus 1.5 * 2^23, whose bits are then the code plus a constant (an exact integer in
    // [-2^22, 2^22] lands in the mantissa): cheaper than a float-to-int conversion that checks for overflow.
    const VF biased = hn::Add(zero_biased, hn::Or(q, hn::BitCast(df, sign)));
    return hn::Sub(hn::BitCast(di, biased), hn::Set(di, kBiasBits));
  }
};

// A lane's sign bit, and its magnitude's bits one ulp up for negative values (bits - (-1)): SegmentSearch's nudge,
// which settles ties at segment limits as NearestCode does.
struct SignAndMagnitude {
  VI sign, m_bits;
  explicit SignAndMagnitude(VF v) {
    const VI bits = hn::BitCast(DI(), v);
    sign = hn::And(bits, hn::Set(DI(), INT32_MIN));
    m_bits = hn::Sub(hn::AndNot(sign, bits), hn::ShiftRight<31>(bits));
  }
};

// Codes by SegmentSearch (codebook.h): compares against the segment limits, per-segment coefficients from
// registers and a rounding; the rare vectors with a lane near a midpoint (0.3% of lanes for bfloat16 input, 0.01%
// for float32) are redone by BucketCoder. Used where a vector holds all the segments' coefficients (AVX2 and up).
struct SegmentCoder {
  static constexpr bool kDefersRedo = false;
  using DB = hn::Repartition<uint8_t, DF>;
  const PreparedCodebook& cb;
  RegTable<SegmentSearch::kSegments> limits, scale, offset, last;
  hn::Vec<DB> binade_segment;  // the 16 entries in every 128-bit block, as byte lookups want them
  VF zero_limit, floor;
  SegmentFinish finish;

  explicit SegmentCoder(const PreparedCodebook& c) : cb(c), finish(c.segments) {
    const SegmentSearch& s = c.segments;
    constexpr int K = SegmentSearch::kSegments;
    limits = RegTable<K>::FromArray(s.limits.data());
    scale = RegTable<K>::FromArray(s.scale.data());
    offset = RegTable<K>::FromArray(s.offset.data());
    last = RegTable<K>::FromArray(s.last.data());
    binade_segment = hn::LoadDup128(DB(), s.binade_segment.data());
    zero_limit = hn::Set(DF(), s.zero_limit);
    floor = hn::Set(DF(), SegmentSearch::kFloor);
  }

  // Also flags lanes too small for the binade lookup.
  HWY_INLINE VI Codes(VF v, hn::Mask<DF>* flagged) const {
    const DF df;
    const DI di;
    const auto [sign, m_bits] = SignAndMagnitude(v);
    const VF m = hn::BitCast(df, m_bits);
    // Byte lookup by the exponent's low four bits; the other three bytes of each lane read as 0 (high bit set).
    const auto exponent = hn::Or(hn::ShiftRight<23>(m_bits), hn::Set(di, static_cast<int32_t>(0x80808000u)));
    const VI bottom = hn::BitCast(di, hn::TableLookupBytesOr0(binade_segment, hn::BitCast(DB(), exponent)));
    // A compare mask is all ones: subtracting it adds one. Integer compare: both sides are positive floats.
    const VI segment = hn::Sub(bottom, hn::VecFromMask(di, hn::Gt(m_bits, hn::BitCast(di, limits.Lookup(bottom)))));
    const auto nonzero = hn::Gt(m, zero_limit);
    const VI code = finish.Codes(m, sign, scale.Lookup(segment), offset.Lookup(segment), last.Lookup(segment),
                                 &nonzero, flagged);
    *flagged = hn::Or(*flagged, hn::And(nonzero, hn::Lt(m, floor)));
    return code;
  }

  HWY_INLINE void Store(VF v, uint8_t* out) const { StoreOrRedo(*this, BucketCoder{cb}, v, out); }
  HWY_INLINE void Store4(VF v0, VF v1, VF v2, VF v3, uint8_t* out) const {
    StoreOrRedo4(*this, BucketCoder{cb}, v0, v1, v2, v3, out);
  }
};
#endif  // HWY_TARGET != HWY_SCALAR

#if HWY_TARGET == HWY_AVX2
// Codes by SegmentSearch's four highest segments alone, which hold nearly every scaled value of real data (for the
// dynamic map the decades from 10^-3 up, and 1.0): the segment is three integer compares, and its coefficients
// come from in-block 4-entry lookups (vpermilps) instead of SegmentCoder's binade lookup followed by 8-entry ones
// (vpermps: 1.3 cycles each on Zen 3 against 0.5, and two of them in series). Vectors with a lane below the four
// segments (zero among them) or near a midpoint are stored again by SegmentCoder. One thread, float32, normal
// data, blocksize 4096, ns per element on Zen 3 in cache / from memory: 0.69 / 0.70 -> 0.55 / 0.65, and with
// PendingRedo 0.56 / 0.59 (2 threads, 64M elements: 23.6 -> 23.3 -> 18.9 ms). On the 4-lane targets the lookups
// cost more (index conversion, Round emulated on SSSE3) than BucketCoder's emulated gather: SSE4 0.95 -> 1.29,
// SSSE3 1.19 -> 1.81.
struct TopSegmentCoder {
  const PreparedCodebook& cb;
  SegmentCoder exact;
  VF scale, offset, last;  // the four segments' entries in each 128-bit block, in the order Position gives
  VI limit1, limit2, limit3, floor;  // float bits: the limits between the four, and the one below them
  SegmentFinish finish;

  // The sum of three compare masks, 0 to -3, indexes the entries by its low two bits (all vpermilps reads): entry k
  // holds segment first + Position(k).
  static constexpr int Position(int k) { return (4 - k) % 4; }

  explicit TopSegmentCoder(const PreparedCodebook& c) : cb(c), exact(c), finish(c.segments) {
    const SegmentSearch& s = c.segments;
    int used = 1;
    while (used < SegmentSearch::kSegments && std::isfinite(s.limits[used - 1])) ++used;
    const int first = std::max(0, used - 4);
    HWY_ALIGN float sc[kN], of[kN], la[kN];
    for (size_t k = 0; k < kN; ++k) {
      const int j = std::min(first + Position(static_cast<int>(k % 4)), used - 1);
      sc[k] = s.scale[j];
      of[k] = s.offset[j];
      la[k] = s.last[j];
    }
    const DF df;
    scale = hn::Load(df, sc);
    offset = hn::Load(df, of);
    last = hn::Load(df, la);
    const auto limit_bits = [&](int j) {  // +inf past the used segments: no magnitude is above it
      return hn::Set(DI(), static_cast<int32_t>(FloatToBits(j < used - 1 ? s.limits[j] : INFINITY)));
    };
    limit1 = limit_bits(first);
    limit2 = limit_bits(first + 1);
    limit3 = limit_bits(first + 2);
    floor = hn::Set(DI(), static_cast<int32_t>(FloatToBits(first > 0 ? s.limits[first - 1] : s.zero_limit)));
  }

  static HWY_INLINE VF Lookup(VF table, VI index) { return VF{_mm256_permutevar_ps(table.raw, index.raw)}; }

  HWY_INLINE VI Codes(VF v, hn::Mask<DF>* flagged) const {
    const DF df;
    const DI di;
    const auto [sign, m_bits] = SignAndMagnitude(v);
    const VI index = hn::Add(hn::Add(hn::VecFromMask(di, hn::Gt(m_bits, limit1)),
                                     hn::VecFromMask(di, hn::Gt(m_bits, limit2))),
                             hn::VecFromMask(di, hn::Gt(m_bits, limit3)));
    const VI code = finish.Codes(hn::BitCast(df, m_bits), sign, Lookup(scale, index), Lookup(offset, index),
                                 Lookup(last, index), nullptr, flagged);
    *flagged = hn::Or(*flagged, hn::RebindMask(df, hn::Gt(floor, m_bits)));  // at or below the four segments
    return code;
  }

  HWY_INLINE void Store(VF v, uint8_t* out) const { StoreOrRedo(*this, exact, v, out); }

  // Stores four vectors' codes and returns their flagged lanes, a byte per vector, for `exact` to store again
  // later (PendingRedo).
  static constexpr bool kDefersRedo = true;
  HWY_INLINE uint32_t StoreFlagged4(VF v0, VF v1, VF v2, VF v3, uint8_t* out) const {
    hn::Mask<DF> f0, f1, f2, f3;
    const VI c0 = Codes(v0, &f0), c1 = Codes(v1, &f1), c2 = Codes(v2, &f2), c3 = Codes(v3, &f3);
    StoreBytes4(c0, c1, c2, c3, out);
    const auto lanes = [](hn::Mask<DF> f) { return static_cast<uint32_t>(_mm256_movemask_ps(f.raw)); };
    return lanes(f0) | lanes(f1) << 8 | lanes(f2) << 16 | lanes(f3) << 24;
  }
};

// The groups of four vectors of a block that a coder flagged, recorded without a branch and stored again after the
// block. TopSegmentCoder flags 11% of groups of normal data (a lane below its four segments in 0.3% of lanes);
// a branch per group, taken that often, mispredicts, and with memory busy each flush costs far more than the redo:
// float32, 64M elements, 2 threads 22.2 -> 18.9 ms; one thread from memory 0.64 -> 0.59 ns per element.
class PendingRedo {
 public:
  HWY_INLINE void Add(int64_t i, uint32_t lanes) {
    entries_[count_] = Entry{i, lanes};
    count_ += lanes != 0;
  }

  // redo(j) stores the codes of the vector at element j again; empties the record.
  template <class Redo>
  HWY_INLINE void Drain(const Redo& redo) {
    for (int e = 0; e < count_; ++e) {
      for (int k = 0; k < 4; ++k) {
        if ((entries_[e].lanes >> (8 * k)) & 0xFF) redo(entries_[e].i + k * static_cast<int64_t>(kN));
      }
    }
    count_ = 0;
  }

 private:
  struct Entry {
    int64_t i;
    uint32_t lanes;
  };
  Entry entries_[kMaxBlocksize / (4 * kN)];
  int count_ = 0;
};
#endif  // HWY_TARGET == HWY_AVX2

template <DType kT, class Coder>
void QuantizeBlocks(const void* x, const Coder& coder, const Blockwise8Range& r, uint8_t* codes, float* absmax) {
  const PreparedCodebook& cb = coder.cb;
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  Bf16TableRunFor<kT> run;
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    const int64_t vec4_end = lo + (hi - lo) / (4 * N) * (4 * N);
    const int64_t vec_end = lo + (hi - lo) / N * N;

    const float amax = BlockAbsmax<kT>(x, lo, hi);
    absmax[b] = amax;

    if constexpr (kT == DType::kBFloat16) {
      const auto fill = [&cb](float a, const float* v, int64_t n, uint8_t* c) { QuantizeByAbsmax8(cb, a, v, n, c); };
      if (run.TryAdd(cb.bf16_codes.get(), fill, static_cast<const uint16_t*>(x), lo, hi, amax, b + 1 < r.block_end,
                     codes + lo)) {
        continue;
      }
    }
    int64_t i = lo;
    if (std::isfinite(amax) && amax != 0.0f) {
      const VF vscale = hn::Set(df, amax);
      // Four vectors per step: their divisions and lookups are independent, so they overlap.
      // The next block's absmax pass then reads from cache while this loop computes.
      const bool prefetch = b + 1 < r.block_end;
      const auto scaled = [&](int64_t j) { return hn::Div(LoadF32<kT>(x, j), vscale); };
      if constexpr (Coder::kDefersRedo) {
#if HWY_TARGET == HWY_AVX2
        PendingRedo pending;
        for (; i < vec4_end; i += 4 * N) {
          if (prefetch) PrefetchElements<kT>(x, i + r.blocksize, 4 * N);
          pending.Add(i, coder.StoreFlagged4(scaled(i), scaled(i + N), scaled(i + 2 * N), scaled(i + 3 * N),
                                             codes + i));
        }
        pending.Drain([&](int64_t j) { coder.exact.Store(scaled(j), codes + j); });
#endif
      } else {
        for (; i < vec4_end; i += 4 * N) {
          if (prefetch) PrefetchElements<kT>(x, i + r.blocksize, 4 * N);
          coder.Store4(scaled(i), scaled(i + N), scaled(i + 2 * N), scaled(i + 3 * N), codes + i);
        }
      }
      for (; i < vec_end; i += N) coder.Store(scaled(i), codes + i);
    }
    for (; i < hi; ++i) codes[i] = NearestCode(cb, ScaleToUnit(LoadAsFloat(kT, x, i), amax));
  }
  run.Finish();
}

template <DType kT>
void QuantizeT(const void* x, const PreparedCodebook& cb, const Blockwise8Range& r, uint8_t* codes,
               float* absmax) {
#if HWY_TARGET == HWY_AVX2
  if (cb.segments.usable) return QuantizeBlocks<kT>(x, TopSegmentCoder(cb), r, codes, absmax);
#elif HWY_TARGET != HWY_SCALAR
  if (kN >= SegmentSearch::kSegments && cb.segments.usable) {
    return QuantizeBlocks<kT>(x, SegmentCoder(cb), r, codes, absmax);
  }
#endif
  QuantizeBlocks<kT>(x, BucketCoder{cb}, r, codes, absmax);
}

// The targets that look codes up by scalar loads (LookupLanes); evaluated per target, where used.
#define BNB_SCALAR_LOAD_LOOKUPS (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3)

#if BNB_SCALAR_LOAD_LOOKUPS
// Lanes(DF) entries of the 256-entry table t for the codes at `codes`: scalar loads assembled in a vector. Gathers
// (Zen 3's, or the emulated ones below AVX2) are slower. The codes are read 8 (4) at a time and split in general
// registers, halving the loads per element: float32 dequantize, one thread, in cache, 0.30 -> 0.25-0.26 ns per
// element on Zen 3 (AVX2, SSE4, SSSE3 alike).
HWY_INLINE VF LookupLanes(const float* t, const uint8_t* codes) {
#if HWY_TARGET == HWY_AVX2
  uint64_t w;
  std::memcpy(&w, codes, sizeof(w));
  const auto at = [&](int k) { return t[(w >> (8 * k)) & 0xFF]; };
  return VF{_mm256_setr_ps(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7))};
#else
  uint32_t w;
  std::memcpy(&w, codes, sizeof(w));
  const auto at = [&](int k) { return t[(w >> (8 * k)) & 0xFF]; };
  return VF{_mm_setr_ps(at(0), at(1), at(2), at(3))};
#endif
}
#endif

// Lanes(DF) code values for the codes at `codes`, as floats. x86 up to AVX2: LookupLanes in the 1 KB table of
// values. One thread, 2^24 elements from memory, ns per element, float32 / bfloat16 output, against the previous
// best (64-bit gathers of code pairs; for bfloat16 on AVX2 four scalar pair loads): AVX2 0.46 / 0.39 -> 0.32 / 0.30,
// SSE4 0.47 / 0.60 -> 0.32 / 0.34, SSSE3 1.10 / 0.84 -> 0.33 / 0.44. Other targets (AVX-512's fast gathers among
// them) gather pairs of codes through PreparedCodebook::pairs: half as many lanes to fetch.
HWY_INLINE VF CodeValues(const PreparedCodebook& cb, const uint8_t* codes) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(df, cb.values[codes[0]]);
#elif BNB_SCALAR_LOAD_LOOKUPS
  (void)df;
  return LookupLanes(cb.values.data(), codes);
#else
  using D64 = hn::Repartition<uint64_t, DF>;
  const D64 d64;
  const auto pair_codes = hn::LoadU(hn::Rebind<uint16_t, D64>(), reinterpret_cast<const uint16_t*>(codes));
  const auto index = hn::PromoteTo(d64, hn::PromoteTo(hn::Rebind<uint32_t, D64>(), pair_codes));
  return hn::BitCast(df, hn::GatherIndex(d64, cb.pairs.data(), hn::BitCast(hn::RebindToSigned<D64>(), index)));
#endif
}

// Whether StoreF32<kT, ..., kStream = true> may write the n-element output at `out`: StreamableOutput, and stores
// of whole 16-byte vectors (a narrower 16-bit store cannot stream). 64M-element dequantize on Zen 3, 2 threads,
// paired runs: f32 15.4 -> 14.3 ms, bf16 14.0 -> 12.8 ms. Callers that stream end with hwy::FlushStream().
template <DType kT>
HWY_INLINE bool UseStreamingStores(const void* out, int64_t n) {
  constexpr int64_t kSize = DTypeSize(kT);
  return kT != DType::kFloat16 && kSize * static_cast<int64_t>(kN) >= 16 && StreamableOutput(out, n * kSize);
}

// Elements [lo, hi) of one block. kNoNaN: the block's absmax is finite, so no product is NaN (codebook values
// are finite).
template <DType kT, bool kNoNaN, bool kStream>
HWY_INLINE void DequantizeBlock(const uint8_t* codes, float amax, const PreparedCodebook& cb, int64_t lo,
                                int64_t hi, void* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t vec_end = lo + (hi - lo) / N * N;
  const VF scale = hn::Set(df, amax);
  int64_t i = lo;
  for (; i + 2 * N <= vec_end; i += 2 * N) {  // two lookups in flight
    const VF v0 = CodeValues(cb, codes + i);
    const VF v1 = CodeValues(cb, codes + i + N);
    StoreF32<kT, kNoNaN, kStream>(hn::Mul(v0, scale), out, i);
    StoreF32<kT, kNoNaN, kStream>(hn::Mul(v1, scale), out, i + N);
  }
  for (; i < vec_end; i += N) {
    StoreF32<kT, kNoNaN, kStream>(hn::Mul(CodeValues(cb, codes + i), scale), out, i);
  }
  for (; i < hi; ++i) StoreFromFloat(kT, out, i, cb.values[codes[i]] * amax);
}

template <DType kT, bool kStream>
void DequantizeBlocks(const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                      const Blockwise8Range& r, void* out) {
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    if (std::isfinite(absmax[b])) {
      DequantizeBlock<kT, true, kStream>(codes, absmax[b], cb, lo, hi, out);
    } else {
      DequantizeBlock<kT, false, kStream>(codes, absmax[b], cb, lo, hi, out);
    }
  }
}

#if BNB_SCALAR_LOAD_LOOKUPS
// 16-bit outputs of blocks of at least kOutputTableFrom elements, on the LookupLanes targets: the block's 256
// possible outputs are computed once, by StoreF32 (so bit for bit what the per-element path writes, rounding and
// NaN included), and each element is then one table entry, without a multiply or a rounding of its own. One
// thread, 2^24 elements from memory, blocksize 4096, bfloat16 output, ns per element on Zen 3: AVX2 0.32 -> 0.26,
// SSE4 0.34 -> 0.25, SSSE3 0.46 -> 0.27; 64M elements on 2 threads 10.8 -> 9.1-9.7 ms. Below 1024 the table's 256
// entries cost more than they save (at 512 the two ways are even).
inline constexpr int64_t kOutputTableFrom = 1024;

// The low 16 bits of each lane of a then b, in order.
HWY_INLINE hn::Vec<hn::Repartition<uint16_t, DF>> LowHalves(hn::Vec<DU32> a, hn::Vec<DU32> b) {
#if HWY_TARGET == HWY_AVX2
  // Lanes are below 2^16, so the saturating pack keeps them; it interleaves by 128-bit half, one permute orders.
  return {_mm256_permute4x64_epi64(_mm256_packus_epi32(a.raw, b.raw), 0xD8)};
#elif HWY_TARGET == HWY_SSE4
  return {_mm_packus_epi32(a.raw, b.raw)};
#else
  const hn::Repartition<uint16_t, DF> d16;
  return hn::ConcatEven(d16, hn::BitCast(d16, b), hn::BitCast(d16, a));
#endif
}

template <DType kT, bool kStream>
void DequantizeBlocksByTable(const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                             const Blockwise8Range& r, void* out) {
  static_assert(DTypeSize(kT) == 2, "tables hold 16-bit outputs");
  const DF df;
  const DU32 du32;
  const hn::Repartition<uint16_t, DF> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  HWY_ALIGN uint16_t outputs[kCodebookSize];
  HWY_ALIGN float entries[kCodebookSize];  // outputs widened to 32 bits, as float bit patterns for LookupLanes
  uint16_t* o = static_cast<uint16_t*>(out);
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const VF scale = hn::Set(df, absmax[b]);
    for (int k = 0; k < kCodebookSize; k += static_cast<int>(N)) {
      StoreF32<kT>(hn::Mul(hn::LoadU(df, cb.values.data() + k), scale), outputs, k);
      hn::Store(hn::BitCast(df, hn::PromoteTo(du32, hn::Load(DU16(), outputs + k))), df, entries + k);
    }
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    int64_t i = lo;
    for (; i + 4 * N <= hi; i += 4 * N) {
      const auto v0 = LowHalves(hn::BitCast(du32, LookupLanes(entries, codes + i)),
                                hn::BitCast(du32, LookupLanes(entries, codes + i + N)));
      const auto v1 = LowHalves(hn::BitCast(du32, LookupLanes(entries, codes + i + 2 * N)),
                                hn::BitCast(du32, LookupLanes(entries, codes + i + 3 * N)));
      if constexpr (kStream) {
        hn::Stream(v0, d16, o + i);
        hn::Stream(v1, d16, o + i + 2 * N);
      } else {
        hn::StoreU(v0, d16, o + i);
        hn::StoreU(v1, d16, o + i + 2 * N);
      }
    }
    for (; i + 2 * N <= hi; i += 2 * N) {
      const auto v = LowHalves(hn::BitCast(du32, LookupLanes(entries, codes + i)),
                               hn::BitCast(du32, LookupLanes(entries, codes + i + N)));
      if constexpr (kStream) {
        hn::Stream(v, d16, o + i);
      } else {
        hn::StoreU(v, d16, o + i);
      }
    }
    for (; i < hi; ++i) o[i] = outputs[codes[i]];
  }
}
#endif

template <DType kT>
void DequantizeT(const uint8_t* codes, const float* absmax, const PreparedCodebook& cb, const Blockwise8Range& r,
                 void* out) {
#if BNB_SCALAR_LOAD_LOOKUPS
  if constexpr (kT != DType::kFloat32) {
    if (r.blocksize >= kOutputTableFrom) {
      // Whole 16-byte vectors from 64-byte aligned block starts: streamable whenever the output is.
      if (StreamableOutput(out, r.n * DTypeSize(kT))) {
        DequantizeBlocksByTable<kT, true>(codes, absmax, cb, r, out);
        hwy::FlushStream();
        return;
      }
      return DequantizeBlocksByTable<kT, false>(codes, absmax, cb, r, out);
    }
  }
#endif
  if (UseStreamingStores<kT>(out, r.n)) {
    DequantizeBlocks<kT, true>(codes, absmax, cb, r, out);
    hwy::FlushStream();
    return;
  }
  DequantizeBlocks<kT, false>(codes, absmax, cb, r, out);
}

void Quantize(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r, uint8_t* codes,
              float* absmax) {
  switch (dtype) {
    case DType::kFloat32: return QuantizeT<DType::kFloat32>(x, cb, r, codes, absmax);
    case DType::kFloat16: return QuantizeT<DType::kFloat16>(x, cb, r, codes, absmax);
    case DType::kBFloat16: return QuantizeT<DType::kBFloat16>(x, cb, r, codes, absmax);
  }
}

void Dequantize(DType dtype, const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                const Blockwise8Range& r, void* out) {
  switch (dtype) {
    case DType::kFloat32: return DequantizeT<DType::kFloat32>(codes, absmax, cb, r, out);
    case DType::kFloat16: return DequantizeT<DType::kFloat16>(codes, absmax, cb, r, out);
    case DType::kBFloat16: return DequantizeT<DType::kBFloat16>(codes, absmax, cb, r, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {

HWY_EXPORT(Quantize);
HWY_EXPORT(Dequantize);

void QuantizeBlockwise8(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r,
                        uint8_t* codes, float* absmax) {
  HWY_DYNAMIC_DISPATCH(Quantize)(dtype, x, cb, r, codes, absmax);
}

void DequantizeBlockwise8(DType dtype, const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                          const Blockwise8Range& r, void* out) {
  HWY_DYNAMIC_DISPATCH(Dequantize)(dtype, codes, absmax, cb, r, out);
}

void QuantizeByAbsmax8(const PreparedCodebook& cb, float amax, const float* x, int64_t n, uint8_t* codes) {
  constexpr int64_t kBlock = kMaxBlocksize, kPerBlock = kBlock - 1;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  std::vector<float> led(blocks * kBlock, 0.0f);
  for (int64_t b = 0; b < blocks; ++b) led[b * kBlock] = amax;
  for (int64_t k = 0; k < n; ++k) led[k / kPerBlock * kBlock + 1 + k % kPerBlock] = x[k];
  std::vector<uint8_t> led_codes(led.size());
  std::vector<float> absmax(blocks);
  QuantizeBlockwise8(DType::kFloat32, led.data(), cb, Blockwise8Range{blocks * kBlock, kBlock, 0, blocks},
                     led_codes.data(), absmax.data());
  for (int64_t k = 0; k < n; ++k) codes[k] = led_codes[k / kPerBlock * kBlock + 1 + k % kPerBlock];
}

}  // namespace bnb::core
#endif  // HWY_ONCE
