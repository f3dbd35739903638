// The numerics of 4-bit quantization that blockwise4.cuh runs on the GPU, in a header that also compiles as plain
// host C++ (no CUDA headers, no standard headers under NVRTC), so that the host tests check these very functions
// and tables against bnb/core (bnb/tests/jit_codebook4_test.cc) and no second copy can drift.
//
// - Codebook4Tables: the 16 code values of NF4 / FP4 and, derived from them at compile time, the 15 midpoints and
//   the sorted-position -> code map of bnb::core::Codebook4 (blockwise4.h).
// - The division by absmax is numerics.cuh's ScaleFast; quotients below 2^-20, where it may be an ulp off, all
//   fall in the table's clamped bottom bucket, whose code does not depend on the exact value.
// - A bucket table that turns a scaled value into its code with one shared-memory load and one compare instead of a
//   15-midpoint search: the key of s is its sign, exponent and 2 leading mantissa bits (|s| clamped below at
//   2^-12), and every bucket holds at most one code change (checked by the host test for every bucket used). The
//   compiler computes the table (MakeKeyTable); each CTA copies it into shared memory.
#pragma once

#include "numerics.cuh"

namespace bnb {
namespace cb4 {

// QUANT template argument values (bnb::core::Quant4 order).
constexpr int kNF4 = 0;
constexpr int kFP4 = 1;

struct Codebook4Tables {
  float value[16];          // code order
  float mid[15];            // SplitPoint(sorted[i], sorted[i + 1]), ascending
  unsigned char s2c[16];    // sorted position -> lowest code holding that value
};

// bnb::core::Codebook4's preparation, evaluated by the compiler: a stable sort of the codes by value (so among equal
// values, FP4's +0 and -0, the lowest code comes first), float32 midpoints, and each sorted position mapped to the
// lowest code whose value equals it (== treats +0 and -0 as one value).
BNB_CONSTEXPR_HD Codebook4Tables MakeCodebook4Tables(int quant) {
  // NF4: bitsandbytes' get_4bit_type("nf4") values, float32 values printed in full (exact literals).
  // FP4: bitsandbytes' values divided by their absolute maximum 12 in float32 (each division correctly rounded).
  Codebook4Tables t{};
  if (quant == kNF4) {
    const float v[16] = {-1.0f,
                         -0.6961928009986877f,
                         -0.5250730514526367f,
                         -0.39491748809814453f,
                         -0.28444138169288635f,
                         -0.18477343022823334f,
                         -0.09105003625154495f,
                         0.0f,
                         0.07958029955625534f,
                         0.16093020141124725f,
                         0.24611230194568634f,
                         0.33791524171829224f,
                         0.44070982933044434f,
                         0.5626170039176941f,
                         0.7229568362236023f,
                         1.0f};
    for (int i = 0; i < 16; ++i) t.value[i] = v[i];
  } else {
    const float v[16] = {0.0f / 12.0f,  0.0625f / 12.0f,  8.0f / 12.0f,  12.0f / 12.0f,
                         4.0f / 12.0f,  6.0f / 12.0f,     2.0f / 12.0f,  3.0f / 12.0f,
                         -0.0f / 12.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f,
                         -4.0f / 12.0f, -6.0f / 12.0f,    -2.0f / 12.0f, -3.0f / 12.0f};
    for (int i = 0; i < 16; ++i) t.value[i] = v[i];
  }
  int order[16] = {};
  for (int i = 0; i < 16; ++i) order[i] = i;
  for (int i = 1; i < 16; ++i) {  // insertion sort: stable
    const int o = order[i];
    int j = i;
    while (j > 0 && t.value[o] < t.value[order[j - 1]]) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = o;
  }
  for (int i = 0; i < 15; ++i) t.mid[i] = SplitPoint(t.value[order[i]], t.value[order[i + 1]]);
  for (int i = 0; i < 16; ++i) {
    int code = 0;
    while (!(t.value[code] == t.value[order[i]])) ++code;
    t.s2c[i] = static_cast<unsigned char>(code);
  }
  return t;
}

// Sorted position of v: the number of midpoints strictly below it (bnb::core::SortedPosition4; NaN -> 0).
BNB_CONSTEXPR_HD int SortedPosition(const Codebook4Tables& t, float v) {
  int pos = 0;
  for (int i = 0; i < 15; ++i) pos += (v > t.mid[i]) ? 1 : 0;
  return pos;
}

// ---- Code table. ----
constexpr int kKeyShift = 21;                   // sign | 8 exponent bits | 2 mantissa bits
constexpr unsigned kTinyBits = 115u << 23;      // 2^-12: |s| below it is clamped up to it
constexpr unsigned kKeyMin = kTinyBits >> kKeyShift;                 // 460
constexpr unsigned kKeyPosEnd = 512;                                 // positive keys: [460, 512): |s| < 2
constexpr unsigned kKeyNegBegin = 1024 + kKeyMin;                    // negative keys: [1484, 1536)
constexpr unsigned kKeyEnd = 1536;
constexpr int kKeyTableSize = static_cast<int>(kKeyEnd - kKeyMin);   // 1076 slots, indexed by key - kKeyMin
constexpr int kKeysUsed = 2 * static_cast<int>(kKeyPosEnd - kKeyMin);  // 104 of them are ever read

// One bucket: code(s) = s > mid ? hi : lo for every s whose key is this bucket's.
struct KeyEntry {
  float mid;
  unsigned char lo, hi, valid, pad;
};

// The i-th used key, i in [0, kKeysUsed).
BNB_CONSTEXPR_HD unsigned UsedKey(int i) {
  const int half = kKeysUsed / 2;
  return i < half ? kKeyMin + static_cast<unsigned>(i) : kKeyNegBegin + static_cast<unsigned>(i - half);
}

// Key of s (s not NaN): sign and magnitude bits of max(|s|, 2^-12), shifted.
BNB_HD unsigned KeyOf(float s) {
  const unsigned b = FloatBits(s);
  unsigned m = b & 0x7FFFFFFFu;
  m = m > kTinyBits ? m : kTinyBits;
  return (m | (b & 0x80000000u)) >> kKeyShift;
}

// The entry of `key`. The bucket is the closed range of floats with that key (for the bottom keys, extended down
// to 0 by the clamp). valid = 0 when the codes in it change more than once (never for the used keys of NF4 and FP4).
BNB_CONSTEXPR_HD KeyEntry MakeKeyEntry(const Codebook4Tables& t, unsigned key) {
  const unsigned first = key << kKeyShift, last = first | ((1u << kKeyShift) - 1u);
  const bool neg = (key & 0x400u) != 0;
  unsigned lo_bits = neg ? last : first, hi_bits = neg ? first : last;
  if ((key & 0x3FFu) == kKeyMin) {  // the clamped bottom bucket reaches 0 (+0 or -0)
    if (neg) hi_bits = 0x80000000u;
    else lo_bits = 0u;
  }
  const float lo_v = BitsFloat(lo_bits), hi_v = BitsFloat(hi_bits);
  const int pl = SortedPosition(t, lo_v), ph = SortedPosition(t, hi_v);
  KeyEntry e{};
  e.lo = t.s2c[pl];
  e.hi = t.s2c[ph];
  e.mid = BitsFloat(0x7F800000u);  // +inf: no code change, s > mid never holds
  e.valid = 1;
  e.pad = 0;
  // Midpoints mid[pl .. ph-1] lie in the bucket; the code may change at most at one of them.
  int changes = 0;
  for (int i = pl; i < ph; ++i) {
    if (t.s2c[i + 1] != t.s2c[i]) {
      ++changes;
      e.mid = t.mid[i];
    }
  }
  if (changes > 1 || ph < pl) e.valid = 0;
  return e;
}

// A table slot: the entry in one 8-byte word (one shared-memory load): mid's bits | lo << 32 | hi << 40.
BNB_CONSTEXPR_HD unsigned long long PackKeyEntry(const KeyEntry& e) {
  return (unsigned long long)FloatBits(e.mid) | ((unsigned long long)e.lo << 32) | ((unsigned long long)e.hi << 40);
}

// The packed entries of the used keys, in UsedKey order, computed by the compiler.
struct KeyTable {
  unsigned long long entry[kKeysUsed];
};
BNB_CONSTEXPR_HD KeyTable MakeKeyTable(int quant) {
  const Codebook4Tables t = MakeCodebook4Tables(quant);
  KeyTable k{};
  for (int i = 0; i < kKeysUsed; ++i) k.entry[i] = PackKeyEntry(MakeKeyEntry(t, UsedKey(i)));
  return k;
}

// The code of s through the table of packed entries, indexed by key - kKeyMin. s must not be NaN.
BNB_HD unsigned LookupCode(const unsigned long long* table, float s) {
  const unsigned long long e = table[KeyOf(s) - kKeyMin];
  const unsigned codes = (unsigned)(e >> 32);
  return s > BitsFloat((unsigned)e) ? (codes >> 8) & 0xFFu : codes & 0xFFu;
}

}  // namespace cb4
}  // namespace bnb
