#include "tools/fuzz/coder_probe.h"

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

// Bit c set: the kernels of this target use Coder c for some input coded by cb.
uint32_t CompiledCoders(const PreparedCodebook& cb) {
#if BNB_RUNS_AVX2_8BIT_KERNELS
  return N_AVX2::CompiledCoders(cb);
#endif
  using fuzz::Coder;
  const auto bit = [](Coder c) { return 1u << static_cast<int>(c); };
  uint32_t coders = bit(Coder::kBucket);
#if BNB_SCALAR_LOAD_LOOKUPS
  if (!cb.half_buckets.entries.empty()) coders |= bit(Coder::kHalfBuckets);
#endif
  return coders;
}

void Probe(int coder, const PreparedCodebook& cb, const float* v, int64_t n, uint8_t* codes) {
#if BNB_RUNS_AVX2_8BIT_KERNELS
  return N_AVX2::Probe(coder, cb, v, n, codes);
#endif
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  if (static_cast<fuzz::Coder>(coder) == fuzz::Coder::kBucket) {
    const BucketCoder c{cb};
    for (int64_t i = 0; i < n; i += N) c.Store(hn::LoadU(df, v + i), codes + i);
  }
#if BNB_SCALAR_LOAD_LOOKUPS
  if (static_cast<fuzz::Coder>(coder) == fuzz::Coder::kHalfBuckets) {
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(v);
    for (int64_t i = 0; i < n; i += N) {
      hn::StoreU(hn::DemoteTo(DU8(), HalfBucketCodes(cb.half_buckets.entries.data(), bits + i)), DU8(), codes + i);
    }
  }
#endif
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

const char* CoderName(Coder c) { return c == Coder::kBucket ? "bucket" : "half-buckets"; }

std::vector<Coder> CodersFor(const core::PreparedCodebook& cb) {
  const uint32_t bits = HWY_DYNAMIC_DISPATCH(core::CompiledCoders)(cb);
  std::vector<Coder> out;
  for (Coder c : {Coder::kBucket, Coder::kHalfBuckets}) {
    if (bits >> static_cast<int>(c) & 1) out.push_back(c);
  }
  return out;
}

void ProbeCoder(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n, uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(core::Probe)(static_cast<int>(coder), cb, v, n, codes);
}

std::string FirstWrongLane(Coder coder, const core::PreparedCodebook& cb, const float* v, int64_t n) {
  std::vector<uint8_t> codes(n);
  ProbeCoder(coder, cb, v, n, codes.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t expected = core::NearestCode(cb, v[i]);
    if (codes[i] != expected) {
      return absl::StrFormat("v = %.9g (bits %08x): code %d, expected %d", v[i], core::FloatToBits(v[i]), codes[i],
                             expected);
    }
  }
  return "";
}

}  // namespace bnb::fuzz
#endif  // HWY_ONCE
