// Per-target coders of blockwise 8-bit quantize: they turn vectors of scaled values (x / absmax, in [-1, 1]) into
// codes by the rule of codebook.h (NearestCode), bit for bit. Included by blockwise8_hwy.cc after
// hwy_common-inl.h, once per target, in the usual Highway -inl.h way.
#if defined(BNB_CORE_BLOCKWISE8_CODERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BNB_CORE_BLOCKWISE8_CODERS_INL_H_
#undef BNB_CORE_BLOCKWISE8_CODERS_INL_H_
#else
#define BNB_CORE_BLOCKWISE8_CODERS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/hwy_common-inl.h"
#include "hwy/highway.h"

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
// kStream: out is vector aligned and written by one streaming store (the x86 targets, which assemble the bytes in
// one vector).
template <bool kStream = false>
HWY_INLINE void StoreBytes4(VI c0, VI c1, VI c2, VI c3, uint8_t* out) {
#if HWY_TARGET == HWY_AVX2
  // Two saturating packs leave the 4-byte groups interleaved by 128-bit half; one permute orders them.
  const __m256i c01 = _mm256_packs_epi32(c0.raw, c1.raw);
  const __m256i c23 = _mm256_packs_epi32(c2.raw, c3.raw);
  const __m256i bytes = _mm256_packus_epi16(c01, c23);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, order);
  if constexpr (kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), ordered);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
  }
#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(c0.raw, c1.raw), _mm_packs_epi32(c2.raw, c3.raw));
  if constexpr (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), bytes);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), bytes);
  }
#else
  static_assert(!kStream, "streaming needs the x86 assembly of the 4 vectors' bytes");
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

  // m: the magnitude; sign: the value's sign bit; nonzero: lanes above zero_limit,
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

// A lane's sign bit, its magnitude's bits, and whether it is negative. The limits are the positive splits, and a
// negative magnitude exactly at one may belong on either side of it (SegmentSearch): Codes flag those lanes.
struct SignAndMagnitude {
  VI sign, m_bits;
  hn::Mask<DI> negative;
  explicit SignAndMagnitude(VF v) {
    const VI bits = hn::BitCast(DI(), v);
    sign = hn::And(bits, hn::Set(DI(), INT32_MIN));
    m_bits = hn::AndNot(sign, bits);
    negative = hn::Lt(bits, hn::Zero(DI()));
  }
  // Negative lanes whose magnitude equals `limit_bits`.
  HWY_INLINE hn::Mask<DF> NegativeAt(VI limit_bits) const {
    return hn::RebindMask(DF(), hn::And(negative, hn::Eq(m_bits, limit_bits)));
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
    const SignAndMagnitude s(v);
    const VF m = hn::BitCast(df, s.m_bits);
    // Byte lookup by the exponent's low four bits; the other three bytes of each lane read as 0 (high bit set).
    const auto exponent = hn::Or(hn::ShiftRight<23>(s.m_bits), hn::Set(di, static_cast<int32_t>(0x80808000u)));
    const VI bottom = hn::BitCast(di, hn::TableLookupBytesOr0(binade_segment, hn::BitCast(DB(), exponent)));
    // The one limit that may lie in the lane's binade. A compare mask is all ones: subtracting it adds one. Integer
    // compare: both sides are positive floats.
    const VI limit = hn::BitCast(di, limits.Lookup(bottom));
    const VI segment = hn::Sub(bottom, hn::VecFromMask(di, hn::Gt(s.m_bits, limit)));
    const auto nonzero = hn::Gt(m, zero_limit);
    const VI code = finish.Codes(m, s.sign, scale.Lookup(segment), offset.Lookup(segment), last.Lookup(segment),
                                 &nonzero, flagged);
    const auto ties = hn::Or(s.NegativeAt(limit), s.NegativeAt(hn::BitCast(di, zero_limit)));
    *flagged = hn::Or(hn::Or(*flagged, ties), hn::And(nonzero, hn::Lt(m, floor)));
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
// SSSE3 1.19 -> 1.81. Float inputs now go by HalfBucketCodes where the codebook allows (faster still); this coder
// serves the other segment-shaped codebooks and the bfloat16 blocks the Bf16Codes tables do not.
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
    const SignAndMagnitude s(v);
    const VI m_bits = s.m_bits;
    const VI index = hn::Add(hn::Add(hn::VecFromMask(di, hn::Gt(m_bits, limit1)),
                                     hn::VecFromMask(di, hn::Gt(m_bits, limit2))),
                             hn::VecFromMask(di, hn::Gt(m_bits, limit3)));
    const VI code = finish.Codes(hn::BitCast(df, m_bits), s.sign, Lookup(scale, index), Lookup(offset, index),
                                 Lookup(last, index), nullptr, flagged);
    const auto ties = hn::Or(hn::Or(s.NegativeAt(limit1), s.NegativeAt(limit2)), s.NegativeAt(limit3));
    const auto below = hn::RebindMask(df, hn::Not(hn::Gt(m_bits, floor)));  // at or below the four segments
    *flagged = hn::Or(hn::Or(*flagged, ties), below);
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

#endif  // HWY_TARGET == HWY_AVX2

#if BNB_SCALAR_LOAD_LOOKUPS
// Codes by HalfBuckets (codebook.h) of the Lanes(DF) scaled values whose float bits are at q: each lane's entry by a
// scalar load, assembled in a vector (Zen 3's gathers, and the emulated ones below AVX2, are slower), then one
// compare and a byte shuffle. Every value must lie in [-1, 1]. q must not have been stored just before: see
// LookupCodes16.
HWY_INLINE VI HalfBucketCodes(const int32_t* entries, const uint32_t* q) {
#if HWY_TARGET == HWY_SSSE3  // no pinsrd
  const auto bucket = [q](int k) { return LoadWord(q + k) >> HalfBuckets::kShift; };
  const auto at = [&](int k) { return _mm_cvtsi32_si128(entries[bucket(k)]); };
  const __m128i a01 = _mm_unpacklo_epi32(at(0), at(1));
  const __m128i a23 = _mm_unpacklo_epi32(at(2), at(3));
  const VI e{_mm_unpacklo_epi64(a01, a23)};
#else
  // Buckets two to a 64-bit load, split in general registers: fewer loads, which bound the lookups once the
  // divisions overlap them (CodeBlockByHalfBuckets). AVX2, in cache, ns per element: interleaved stages with
  // 32-bit loads 0.43-0.44, with these 0.39; without interleaving these ran 3% slower than 32-bit loads.
  const auto four = [&](int k0) {
    const uint64_t w01 = LoadPair(q + k0), w23 = LoadPair(q + k0 + 2);
    constexpr int kHigh = 32 + HalfBuckets::kShift;
    return LoadInsert4(entries, static_cast<uint32_t>(w01) >> HalfBuckets::kShift, static_cast<uint32_t>(w01 >> kHigh),
                       static_cast<uint32_t>(w23) >> HalfBuckets::kShift, static_cast<uint32_t>(w23 >> kHigh));
  };
#if HWY_TARGET == HWY_AVX2
  const VI e{_mm256_inserti128_si256(_mm256_castsi128_si256(four(0)), four(4), 1)};
#else
  const VI e{four(0)};
#endif
#endif
  const DI di;
  const auto low16 = hn::Set(di, 0xFFFF);
  const auto above = hn::Gt(hn::And(hn::LoadU(di, reinterpret_cast<const int32_t*>(q)), low16), hn::And(e, low16));
  // Byte 3 (keys up to the split) or byte 2 of each lane's entry, the rest zero: one byte shuffle, whose control
  // (0x80 zeroes) the mask adjusts by -1. Against a blend of the entry and the entry << 8, then >> 24, ns per
  // element from memory: AVX2 even, SSE4 0.61 -> 0.59, SSSE3 (blend emulated) 0.81 -> 0.76.
  const hn::Repartition<uint8_t, DI> d8;
  HWY_ALIGN static constexpr int32_t kPick[16] = {
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu),
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu),
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu),
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu)};
  const VI pick = hn::Add(hn::Load(di, kPick), hn::VecFromMask(di, above));
  return hn::BitCast(di, hn::TableLookupBytesOr0(hn::BitCast(d8, e), hn::BitCast(d8, pick)));
}
#endif

// The groups of four vectors of a block that a coder flagged (those with kDefersRedo return their flagged lanes
// from StoreFlagged4, a byte per vector), recorded without a branch and stored again after the block.
// TopSegmentCoder flags 11% of groups of normal data (a lane below its four segments in 0.3% of lanes); a branch
// per group, taken that often, mispredicts, and with memory busy each flush costs far more than the redo: float32,
// 64M elements, 2 threads 22.2 -> 18.9 ms; one thread from memory 0.64 -> 0.59 ns per element.
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

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#endif  // BNB_CORE_BLOCKWISE8_CODERS_INL_H_
