#include "tools/fuzz/coder_probe.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tools/fuzz/coder_probe.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"
#include "bnb/core/blockwise8_coders-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Bit c set: this target compiles Coder c and the kernels would use it for some input coded by cb.
uint32_t CompiledCoders(const PreparedCodebook& cb) {
  using fuzz::Coder;
  const auto bit = [](Coder c) { return 1u << static_cast<int>(c); };
  uint32_t coders = bit(Coder::kBucket);
#if HWY_TARGET != HWY_SCALAR
  if (kN >= SegmentSearch::kSegments && cb.segments.usable) coders |= bit(Coder::kSegment);
#endif
#if HWY_TARGET == HWY_AVX2
  if (cb.segments.usable) coders |= bit(Coder::kTopSegment);
#endif
#if BNB_SCALAR_LOAD_LOOKUPS
  if (!cb.half_buckets.entries.empty()) coders |= bit(Coder::kHalfBuckets);
#endif
  return coders;
}

// Codes and flags of one vector by a coder with Codes(v, &flagged).
template <class C>
HWY_INLINE void StoreCodesAndFlags(const C& coder, VF v, uint8_t* codes, uint8_t* flagged) {
  const DI di;
  hn::Mask<DF> f;
  hn::StoreU(hn::DemoteTo(DU8(), coder.Codes(v, &f)), DU8(), codes);
  hn::StoreU(hn::DemoteTo(DU8(), hn::IfThenElseZero(hn::RebindMask(di, f), hn::Set(di, 1))), DU8(), flagged);
}

void Probe(int coder, const PreparedCodebook& cb, const float* v, int64_t n, uint8_t* codes, uint8_t* flagged) {
  using fuzz::Coder;
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  std::memset(flagged, 0, static_cast<size_t>(n));
  switch (static_cast<Coder>(coder)) {
    case Coder::kBucket: {
      const BucketCoder c{cb};
      for (int64_t i = 0; i < n; i += N) c.Store(hn::LoadU(df, v + i), codes + i);
      return;
    }
    case Coder::kSegment: {
#if HWY_TARGET != HWY_SCALAR
      const SegmentCoder c(cb);
      for (int64_t i = 0; i < n; i += N) StoreCodesAndFlags(c, hn::LoadU(df, v + i), codes + i, flagged + i);
#endif
      return;
    }
    case Coder::kTopSegment: {
#if HWY_TARGET == HWY_AVX2
      const TopSegmentCoder c(cb);
      for (int64_t i = 0; i < n; i += N) StoreCodesAndFlags(c, hn::LoadU(df, v + i), codes + i, flagged + i);
#endif
      return;
    }
    case Coder::kHalfBuckets: {
#if BNB_SCALAR_LOAD_LOOKUPS
      const int32_t* entries = cb.half_buckets.entries.data();
      const uint32_t* bits = reinterpret_cast<const uint32_t*>(v);
      for (int64_t i = 0; i < n; i += N) {
        hn::StoreU(hn::DemoteTo(DU8(), HalfBucketCodes(entries, bits + i)), DU8(), codes + i);
      }
#endif
      return;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bnb::core {
HWY_EXPORT(CompiledCoders);
HWY_EXPORT(Probe);
}  // namespace bnb::core

namespace bnb::fuzz {

const char* CoderName(Coder c) {
  switch (c) {
    case Coder::kBucket: return "bucket";
    case Coder::kSegment: return "segment";
    case Coder::kTopSegment: return "top-segment";
    case Coder::kHalfBuckets: return "half-buckets";
  }
  return "?";
}

std::vector<Coder> CodersFor(const core::PreparedCodebook& cb) {
  const uint32_t bits = HWY_DYNAMIC_DISPATCH(core::CompiledCoders)(cb);
  std::vector<Coder> out;
  for (Coder c : {Coder::kBucket, Coder::kSegment, Coder::kTopSegment, Coder::kHalfBuckets}) {
    if (bits >> static_cast<int>(c) & 1) out.push_back(c);
  }
  return out;
}

void ProbeCoder(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n, uint8_t* codes,
                uint8_t* flagged) {
  HWY_DYNAMIC_DISPATCH(core::Probe)(static_cast<int>(coder), cb, v, n, codes, flagged);
}

std::string FirstWrongLane(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n) {
  std::vector<uint8_t> codes(n), flagged(n);
  ProbeCoder(coder, cb, v, n, codes.data(), flagged.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t expected = core::NearestCode(cb, v[i]);
    if (!flagged[i] && codes[i] != expected) {
      return absl::StrFormat("v = %.9g (bits %08x): code %d, expected %d", v[i], core::FloatToBits(v[i]), codes[i],
                             expected);
    }
  }
  return "";
}

}  // namespace bnb::fuzz
#endif  // HWY_ONCE
