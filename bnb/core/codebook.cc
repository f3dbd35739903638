#include "bnb/core/codebook.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "bnb/core/bf16_codes.h"
#include "bnb/core/dtype.h"

namespace bnb::core {
namespace {

// bitsandbytes' create_dynamic_map() (signed, 7 exponent bits, 8 bits) as float32 bit patterns, as torch's AVX2 CPU
// kernels compute it. bitsandbytes builds the map with torch.linspace, whose CPU code rounds a few entries
// differently (by 1 ulp) without FMA, so the published default is pinned here; the algorithm below (linspace by
// fused multiply-adds) reproduces it bit for bit (core_codebook_test checks both).
constexpr uint32_t kDefaultDynamicMapBits[kCodebookSize] = {
    0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000,
    0xbf616666, 0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333,
    0xbf44999a, 0xbf410000, 0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666,
    0xbf27cccd, 0xbf243334, 0xbf20999a, 0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a,
    0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333, 0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a,
    0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a, 0xbeb86666, 0xbeb13333, 0xbeaa0000,
    0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999, 0xbe6f3333, 0xbe60cccd,
    0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000, 0xbddb3334,
    0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
    0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d,
    0xbd5b851f, 0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148,
    0xbcfeb852, 0xbce7ae15, 0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148,
    0xbc1f3b64, 0xbc160418, 0xbc0ccccd, 0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4,
    0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a, 0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d,
    0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01, 0xb9c7e283, 0xb98ce705, 0xb923d70b,
    0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94, 0xb513a3b7, 0x00000000,
    0x3513a3b7, 0x365a1a94, 0x370205ff, 0x37b24206, 0x38378034, 0x388aefb3, 0x38ba1f4b, 0x3923d70b,
    0x398ce705, 0x39c7e283, 0x3a016f01, 0x3a1eecc1, 0x3a3c6a80, 0x3a59e83e, 0x3a7765ff, 0x3aa7ef9d,
    0x3af1a9fc, 0x3b1db22d, 0x3b428f5c, 0x3b676c8a, 0x3b8624dd, 0x3b989374, 0x3bab020d, 0x3bbd70a4,
    0x3bcfdf3b, 0x3be24dd3, 0x3bf4bc6a, 0x3c039581, 0x3c0ccccd, 0x3c160418, 0x3c1f3b64, 0x3c3ae148,
    0x3c68f5c3, 0x3c8b851f, 0x3ca28f5d, 0x3cb9999a, 0x3cd0a3d7, 0x3ce7ae15, 0x3cfeb852, 0x3d0ae148,
    0x3d166667, 0x3d21eb85, 0x3d2d70a3, 0x3d38f5c3, 0x3d447ae1, 0x3d500000, 0x3d5b851f, 0x3d670a3d,
    0x3d728f5d, 0x3d7e147b, 0x3d84cccd, 0x3d8a8f5d, 0x3d9051eb, 0x3d96147b, 0x3d9bd70a, 0x3da1999a,
    0x3da75c2a, 0x3dad1eb8, 0x3db2e148, 0x3db8a3d7, 0x3dbe6667, 0x3dc428f7, 0x3dc9eb85, 0x3ddb3334,
    0x3df80000, 0x3e0a6666, 0x3e18cccd, 0x3e273333, 0x3e35999a, 0x3e440000, 0x3e526666, 0x3e60cccd,
    0x3e6f3333, 0x3e7d9999, 0x3e860000, 0x3e8d3334, 0x3e946666, 0x3e9b999a, 0x3ea2cccc, 0x3eaa0000,
    0x3eb13333, 0x3eb86666, 0x3ebf999a, 0x3ec6cccc, 0x3ece0000, 0x3ed53333, 0x3edc6666, 0x3ee3999a,
    0x3eeacccc, 0x3ef20000, 0x3ef93332, 0x3f003333, 0x3f03cccc, 0x3f076666, 0x3f0b0000, 0x3f0e999a,
    0x3f123334, 0x3f15cccd, 0x3f196666, 0x3f1d0000, 0x3f20999a, 0x3f243334, 0x3f27cccd, 0x3f2b6666,
    0x3f2f0000, 0x3f32999a, 0x3f363334, 0x3f39cccd, 0x3f3d6666, 0x3f410000, 0x3f44999a, 0x3f483333,
    0x3f4bcccd, 0x3f4f6666, 0x3f530000, 0x3f56999a, 0x3f5a3333, 0x3f5dcccd, 0x3f616666, 0x3f650000,
    0x3f68999a, 0x3f6c3333, 0x3f6fcccd, 0x3f736666, 0x3f770000, 0x3f7a999a, 0x3f7e3333, 0x3f800000,
};

// torch.linspace(start, end, steps, dtype=float32) as torch 2.x computes it on the CPU: from start for the first
// half and from end for the rest, each value by one fused multiply-add (matched bit for bit for 1..259 steps on
// AVX2; torch's kernels without FMA round twice, up to 2 ulps apart).
std::vector<float> LinspaceF32(float start, float end, int steps) {
  if (steps == 1) return {start};
  std::vector<float> out(steps);
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i) {
    out[i] = i < halfway ? std::fma(step, static_cast<float>(i), start)
                         : std::fma(-step, static_cast<float>(steps - i - 1), end);
  }
  return out;
}

// Appends scale * mean for each pair of neighbours, in float32 as bitsandbytes' tensor arithmetic does.
void AppendScaledMeans(std::vector<float>& data, int items, double scale, bool is_signed) {
  const std::vector<float> b = LinspaceF32(0.1f, 1.0f, items);
  const float s = static_cast<float>(scale);
  for (int sign = 0; sign < (is_signed ? 2 : 1); ++sign) {
    for (int i = 0; i + 1 < items; ++i) {
      const float mean = (b[i] + b[i + 1]) / 2.0f;
      data.push_back((sign ? -s : s) * mean);
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<float>> CreateDynamicMap(bool is_signed, int max_exponent_bits, int total_bits) {
  if (is_signed && max_exponent_bits == 7 && total_bits == 8) return DefaultDynamicMap();
  return ComputeDynamicMap(is_signed, max_exponent_bits, total_bits);
}

std::vector<float> DefaultDynamicMap() {
  std::vector<float> map(kCodebookSize);
  std::memcpy(map.data(), kDefaultDynamicMapBits, sizeof(kDefaultDynamicMapBits));
  return map;
}

absl::StatusOr<std::vector<float>> ComputeDynamicMap(bool is_signed, int max_exponent_bits, int total_bits) {
  const std::string call = absl::StrCat("create_dynamic_map(signed=", is_signed ? "True" : "False",
                                        ", max_exponent_bits=", max_exponent_bits, ", total_bits=", total_bits, ")");
  if (total_bits < 1 || total_bits > 8) {
    return absl::InvalidArgumentError(absl::StrCat(call, ": total_bits must be in 1..8"));
  }
  if (max_exponent_bits < 1 || max_exponent_bits > 64) {  // past 45 decades every float32 value is 0
    return absl::InvalidArgumentError(absl::StrCat(call, ": max_exponent_bits must be in 1..64"));
  }
  // Python's int(2 ** e + 1): 1 for negative e, a linspace of one value and no means. e <= 7 here.
  const auto items = [](int e) { return e < 0 ? 1 : (1 << e) + 1; };
  std::vector<float> data;
  const int non_sign_bits = total_bits - 1;
  for (int i = 0; i < max_exponent_bits; ++i) {
    const int e = i + non_sign_bits - max_exponent_bits + (is_signed ? 0 : 1);
    AppendScaledMeans(data, items(e), std::pow(10.0, -(max_exponent_bits - 1) + i), is_signed);
  }
  // bitsandbytes' additional items: 2^(non_sign_bits - max_exponent_bits) - 1 means, scaled by its loop's last
  // 10^(-(max_exponent_bits - 1) + i), which is 1.
  if (non_sign_bits > max_exponent_bits) {
    AppendScaledMeans(data, 1 << (non_sign_bits - max_exponent_bits), 1.0, is_signed);
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != (size_t{1} << total_bits)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, " describes ", data.size(), " values, not 2^total_bits = ", 1 << total_bits));
  }
  data.resize(kCodebookSize, 0.0f);
  std::sort(data.begin(), data.end());
  return data;
}

namespace {

// The bucket table, from the sorted positions at each bucket's two ends.
void BuildBuckets(PreparedCodebook& cb) {
  using P = PreparedCodebook;
  cb.buckets.assign(P::kTableSize, P::kSearch);
  cb.needs_search = false;
  for (int32_t b = 0; b < P::kPositiveBuckets; ++b) {
    const uint32_t mag_lo = uint32_t(b) << P::kBucketShift, mag_hi = mag_lo | P::kKeyMask;
    for (int negative = 0; negative < 2; ++negative) {
      const float lo = negative ? -BitsToFloat(mag_hi) : BitsToFloat(mag_lo);
      const float hi = negative ? -BitsToFloat(mag_lo) : BitsToFloat(mag_hi);
      const int p_lo = SortedPosition(cb, lo), p_hi = SortedPosition(cb, hi);
      const int32_t below = cb.sorted_to_code[p_lo], above = cb.sorted_to_code[std::min(p_hi, 255)];
      int32_t threshold = 0x8000, low = below, high = below;
      if (p_hi == p_lo + 1) {
        // v > step, in keys: a larger key for positive v, a smaller one for negative v.
        const int32_t step_key = static_cast<int32_t>(FloatToBits(cb.midpoints[p_lo]) & P::kKeyMask);
        if (negative) {
          threshold = step_key;  // key >= step_key: at or below the step
          low = above;
        } else {
          threshold = step_key + 1;
          high = above;
        }
      } else if (p_hi > p_lo + 1) {
        threshold = P::kSearch;
        cb.needs_search = true;
      }
      cb.buckets[b + negative * P::kNegativeBuckets] = threshold | (low << 16) | (high << 24);
    }
  }
}

// HalfBuckets for cb, from the sorted positions at each bucket's two ends; left empty when a bucket holds more than
// one midpoint. Positions are monotone in the key within a bucket (rising for positive values, falling for
// negative ones), so the split is found by bisection.
void BuildHalfBuckets(PreparedCodebook& cb) {
  using H = HalfBuckets;
  std::vector<int32_t> entries(H::kEntries, 0);
  const auto value = [](int32_t bucket, uint32_t key) { return BitsToFloat((uint32_t(bucket) << H::kShift) | key); };
  for (int32_t b = 0; b < H::kEntries; ++b) {
    if ((b & 0x7FFF) > (0x3F800000 >> H::kShift)) continue;  // beyond +-1.0f
    const int p0 = SortedPosition(cb, value(b, 0)), p1 = SortedPosition(cb, value(b, 0xFFFF));
    if (std::abs(p1 - p0) > 1) return;
    uint32_t split = 0xFFFF;
    if (p1 != p0) {
      uint32_t lo = 0, hi = 0xFFFF;  // position p0 at lo, not at hi
      while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        (SortedPosition(cb, value(b, mid)) == p0 ? lo : hi) = mid;
      }
      split = lo;
    }
    entries[b] = static_cast<int32_t>(split | uint32_t(cb.sorted_to_code[p1]) << 16 |
                                      uint32_t(cb.sorted_to_code[p0]) << 24);
  }
  cb.half_buckets.entries = std::move(entries);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const PreparedCodebook>> PrepareCodebookCached(const float* code, int64_t n) {
  struct Entry {
    std::array<float, kCodebookSize> key;
    std::shared_ptr<const PreparedCodebook> value;
  };
  static std::mutex mu;
  static std::deque<Entry> entries;  // most recent first
  constexpr size_t kMaxEntries = 8;
  if (n == kCodebookSize) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (std::memcmp(it->key.data(), code, sizeof(it->key)) == 0) {
        Entry hit = *it;
        entries.erase(it);
        entries.push_front(hit);
        return hit.value;
      }
    }
  }
  absl::StatusOr<PreparedCodebook> cb = PrepareCodebook(code, n);
  if (!cb.ok()) return cb.status();
  auto value = std::make_shared<const PreparedCodebook>(*std::move(cb));
  std::lock_guard<std::mutex> lock(mu);
  entries.push_front(Entry{value->values, value});
  if (entries.size() > kMaxEntries) entries.pop_back();
  return value;
}

float SplitPoint(float lo, float hi) {
  const float s = lo + hi;
  const float m = s * 0.5f;
  if (!std::isfinite(s)) return m;
  // Knuth's TwoSum: lo + hi == s + err exactly.
  const float hi_part = s - lo;
  const float err = (lo - (s - hi_part)) + (hi - hi_part);
  // (m - s) + m is 2m - s exactly (m is s halved, rounded only among subnormals): m lies above (lo + hi) / 2
  // exactly when it exceeds err.
  if (!((m - s) + m > err)) return m;
  return std::nextafter(m, -std::numeric_limits<float>::infinity());
}

absl::StatusOr<PreparedCodebook> PrepareCodebook(const float* code, int64_t n) {
  if (n != kCodebookSize) {
    return absl::InvalidArgumentError(absl::StrCat("code must hold 256 float32 values, got ", n));
  }
  PreparedCodebook cb;
  for (int i = 0; i < kCodebookSize; ++i) {
    if (!std::isfinite(code[i])) {
      return absl::InvalidArgumentError(absl::StrCat("code[", i, "] is ", code[i], "; every entry must be finite"));
    }
    cb.values[i] = code[i];
  }
  std::iota(cb.sorted_to_code.begin(), cb.sorted_to_code.end(), 0);
  std::stable_sort(cb.sorted_to_code.begin(), cb.sorted_to_code.end(),
                   [&](int32_t a, int32_t b) { return cb.values[a] < cb.values[b]; });
  // Within a run of equal values every position maps to the run's first code, so ties pick the first code.
  for (int i = 1; i < kCodebookSize; ++i) {
    if (cb.values[cb.sorted_to_code[i]] == cb.values[cb.sorted_to_code[i - 1]]) {
      cb.sorted_to_code[i] = cb.sorted_to_code[i - 1];
    }
  }
  for (int i = 0; i + 1 < kCodebookSize; ++i) {
    cb.midpoints[i] = SplitPoint(cb.values[cb.sorted_to_code[i]], cb.values[cb.sorted_to_code[i + 1]]);
  }
  BuildBuckets(cb);
  BuildHalfBuckets(cb);
  cb.bf16_codes = Bf16Codes::Create(
      Bf16Codes::SmallestCodeBoundary(cb.midpoints.data(), cb.sorted_to_code.data(), kCodebookSize));
  return cb;
}

}  // namespace bnb::core
