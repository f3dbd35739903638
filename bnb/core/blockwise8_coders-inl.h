// Per-target coders of blockwise 8-bit quantize: they turn vectors of scaled values (x / absmax, in [-1, 1]) into
// codes by the rule of codebook.h (NearestCode), bit for bit: BucketCoder on every target, HalfBucketCodes on the
// x86 targets that look tables up by scalar loads (float32 and float16 input; bfloat16 goes by Bf16Codes tables). Included by blockwise8_hwy.cc after
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

// The AVX-512 targets run the AVX2 8-bit kernels (and coders): on Zen 4, AVX2's scalar-load lookups beat AVX-512's
// gathers and its in-register segment search in every case measured, quantize and dequantize, float32 and bfloat16
// (figures: tools/bench/NOTES.md, 'AVX-512 targets'); on Intel the quantizes run their own (blockwise8_hwy.cc,
// Quantize). foreach_target compiles AVX2 before them, unless AVX2 is the static target
// (compiled last); then they run their own.
#ifndef BNB_RUNS_AVX2_8BIT_KERNELS_DEFINED
#define BNB_RUNS_AVX2_8BIT_KERNELS_DEFINED
#define BNB_RUNS_AVX2_8BIT_KERNELS                                                            \
  ((HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && (HWY_TARGETS & HWY_AVX2) && \
   HWY_STATIC_TARGET != HWY_AVX2)
#endif

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Codes of N scaled values in [-1, 1], by PreparedCodebook's bucket table: one gather and integer compares.
// Codebooks whose table has buckets marked for search (never the dynamic map) check for them and redo those
// vectors with the scalar binary search.
struct BucketCoder {
  const PreparedCodebook& cb;

  // The codes of v's lanes, and each lane's bucket threshold (kSearch: the lane needs the search).
  HWY_INLINE VI Codes(VF v, VI& threshold) const {
    using P = PreparedCodebook;
    const DI di;
    const DU32 du32;
    const auto bits = hn::BitCast(du32, v);
    const auto bucket = hn::BitCast(di, hn::ShiftRight<P::kBucketShift>(bits));  // logical: the sign lands on bit 16
    const auto key = hn::BitCast(di, hn::And(bits, hn::Set(du32, P::kKeyMask)));
    const auto e = hn::GatherIndex(di, cb.buckets.data(), bucket);
    const auto byte = hn::Set(di, 0xFF);  // the shifts are arithmetic: mask off the sign
    threshold = hn::And(e, hn::Set(di, 0xFFFF));
    const auto high = hn::Gt(key, hn::Sub(threshold, hn::Set(di, 1)));  // key >= threshold
    return hn::IfThenElse(high, hn::And(hn::ShiftRight<24>(e), byte), hn::And(hn::ShiftRight<16>(e), byte));
  }

  HWY_INLINE void Store(VF v, uint8_t* out) const {
    VI threshold;
    hn::StoreU(hn::DemoteTo(DU8(), Codes(v, threshold)), DU8(), out);
    if (HWY_UNLIKELY(cb.needs_search) &&
        !hn::AllFalse(DI(), hn::Eq(threshold, hn::Set(DI(), PreparedCodebook::kSearch)))) {
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

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // Store4's 64 codes by one streaming store (out 64-byte aligned; the caller flushes), for codebooks whose buckets
  // never need the search.
  HWY_INLINE void Stream4(VF v0, VF v1, VF v2, VF v3, uint8_t* out) const {
    VI unused;
    __m512i all = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(Codes(v0, unused).raw));
    all = _mm512_inserti32x4(all, _mm512_cvtepi32_epi8(Codes(v1, unused).raw), 1);
    all = _mm512_inserti32x4(all, _mm512_cvtepi32_epi8(Codes(v2, unused).raw), 2);
    all = _mm512_inserti32x4(all, _mm512_cvtepi32_epi8(Codes(v3, unused).raw), 3);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), all);
  }
#endif

  static HWY_NOINLINE void Redo(const PreparedCodebook& cb, VF v, uint8_t* out) {
    HWY_ALIGN float vs[hn::MaxLanes(DF())];
    hn::Store(v, DF(), vs);
    for (size_t j = 0; j < hn::Lanes(DF()); ++j) out[j] = NearestCode(cb, vs[j]);
  }
};

#if BNB_SCALAR_LOAD_LOOKUPS
// Four vectors of int32 codes as bytes, lanes in order, values below 0 saturating to 0.
// kStream: out is vector aligned and written by one streaming store.
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
#else
  const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(c0.raw, c1.raw), _mm_packs_epi32(c2.raw, c3.raw));
  if constexpr (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), bytes);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), bytes);
  }
#endif
}

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
  // divisions overlap them (CodeBlockByHalfBuckets); without that overlap they do not pay. Figures:
  // tools/bench/NOTES.md, 'Half-bucket quantize'.
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
  // (0x80 zeroes) the mask adjusts by -1. A blend of the entry and the entry << 8, then >> 24, is as fast on AVX2
  // and slower below it, most on SSSE3, which emulates the blend (figures: tools/bench/NOTES.md,
  // 'Half-bucket quantize').
  const hn::Repartition<uint8_t, DI> d8;
  HWY_ALIGN static constexpr int32_t kPick[16] = {
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu),
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu),
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu),
      int32_t(0x80808003u), int32_t(0x80808007u), int32_t(0x8080800Bu), int32_t(0x8080800Fu)};
  const VI pick = hn::Add(hn::Load(di, kPick), hn::VecFromMask(di, above));
  return hn::BitCast(di, hn::TableLookupBytesOr0(hn::BitCast(d8, e), hn::BitCast(d8, pick)));
}
#endif  // BNB_SCALAR_LOAD_LOOKUPS

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#endif  // BNB_CORE_BLOCKWISE8_CODERS_INL_H_
