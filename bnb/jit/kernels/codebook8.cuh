// The 8-bit quantizer's code search as blockwise8.cuh runs it on the GPU, in a header that also compiles as plain
// host C++ (no CUDA headers, no standard headers under NVRTC), so that bnb/tests/jit_codebook8_test.cc checks these
// very functions against bnb::core::NearestCode.
//
// prepare_codebook8 (blockwise8.cuh) prepares the codebook as bnb::core::PrepareCodebook does (sorted values, the
// 255 midpoints, sorted position -> code) and from it this bucket table, which every CTA of quantize_blockwise8
// copies into shared memory: the key of a scaled value s is its sign, exponent and kMantBits leading mantissa bits
// (|s| clamped below at 2^-20), and a bucket holding at most one code change gives the code with two loads (entry,
// midpoint) and one compare instead of an 8-step search. Buckets with more changes are marked, and those values
// take the search: none of the signed dynamic map's (a bucket spans 1/128 of a binade, 0.0039 in [0.5, 1), where
// even the unsigned map's values are 0.007 apart), only the bottom one of the unsigned map's (two midpoints below
// 2^-20).
#pragma once

#include "numerics.cuh"

namespace bnb {
namespace cb8 {

constexpr int kMantBits = 7;
constexpr int kKeyShift = 23 - kMantBits;
constexpr unsigned kFloorBits = 107u << 23;  // 2^-20: smaller |s| are clamped up to it
constexpr unsigned kFloorKey = kFloorBits >> kKeyShift;
constexpr int kPerSign = static_cast<int>(((127u << 23) >> kKeyShift) - kFloorKey) + (1 << kMantBits);  // to [1, 2)
constexpr int kTableSize = 2 * kPerSign;  // 5376 entries, 21 KB

// Table index of a scaled value s (|s| < 2, not NaN): positive keys first, then negative ones.
BNB_HD int KeyIndex(float s) {
  const unsigned b = FloatBits(s);
  unsigned m = b & 0x7FFFFFFFu;
  m = m > kFloorBits ? m : kFloorBits;
  return static_cast<int>((m >> kKeyShift) - kFloorKey) + ((b >> 31) ? kPerSign : 0);
}

// The number of the 255 ascending midpoints strictly below v (bnb::core::SortedPosition; NaN -> 0).
BNB_HD int SortedPosition(const float* mid, float v) {
  int pos = 0;
  for (int step = 128; step > 0; step >>= 1) pos += (v > mid[pos + step - 1]) ? step : 0;
  return pos;
}

// The closed range [lo, hi] of scaled values whose key is table entry `index` (the bottom buckets reach to +-0).
BNB_HD void BucketRange(int index, float* lo, float* hi) {
  const bool neg = index >= kPerSign;
  const unsigned key = static_cast<unsigned>(neg ? index - kPerSign : index) + kFloorKey;
  const unsigned first = key == kFloorKey ? 0u : key << kKeyShift;
  const unsigned last = (key << kKeyShift) | ((1u << kKeyShift) - 1u);
  *lo = neg ? BitsFloat(last | 0x80000000u) : BitsFloat(first);
  *hi = neg ? BitsFloat(first | 0x80000000u) : BitsFloat(last);
}

// SortedPosition(mid, v), walking from `pos` (any position in [0, 255]; a nearby one makes the walk short).
BNB_HD int WalkPosition(const float* mid, int pos, float v) {
  while (pos < 255 && v > mid[pos]) ++pos;
  while (pos > 0 && !(v > mid[pos - 1])) --pos;
  return pos;
}

// Table entry `index` as one 32-bit word: bits 0..7 the sorted index i of the midpoint mid[i] where the code changes
// (255 when nowhere: the caller's mid[255] is +inf), 8..15 the code at or below it, 16..23 the code above it, bit 24
// set when the bucket holds more than one change. mid: the 255 midpoints; s2c: sorted position -> code (256).
// *pos: where the searches start (see WalkPosition); left at the bucket's upper end, so that filling consecutive
// entries walks only a few steps each.
BNB_HD unsigned MakeEntry(const float* mid, const unsigned char* s2c, int index, int* pos) {
  float lo, hi;
  BucketRange(index, &lo, &hi);
  const int pl = WalkPosition(mid, *pos, lo);
  const int ph = WalkPosition(mid, pl, hi);
  *pos = ph;
  unsigned change = 255u;
  int changes = 0;
  for (int i = pl; i < ph; ++i) {
    if (s2c[i + 1] != s2c[i]) {
      ++changes;
      change = static_cast<unsigned>(i);
    }
  }
  return change | (static_cast<unsigned>(s2c[pl]) << 8) | (static_cast<unsigned>(s2c[ph]) << 16) |
         (static_cast<unsigned>(changes > 1) << 24);
}

// Entries [begin, end) into table[begin, end): one thread's share of the table.
BNB_HD void MakeEntries(const float* mid, const unsigned char* s2c, int begin, int end, unsigned* table) {
  if (begin >= end) return;
  float lo, hi;
  BucketRange(begin, &lo, &hi);
  int pos = SortedPosition(mid, lo);
  for (int i = begin; i < end; ++i) table[i] = MakeEntry(mid, s2c, i, &pos);
}

// The code of s through the table and the midpoints (mid[255] = +inf); false when s's bucket is marked (the caller
// then searches).
BNB_HD bool LookupCode(const unsigned* table, const float* mid, float s, unsigned* code) {
  const unsigned e = table[KeyIndex(s)];
  *code = (e >> (s > mid[e & 0xFFu] ? 16 : 8)) & 0xFFu;
  return (e >> 24) == 0;
}

}  // namespace cb8
}  // namespace bnb
