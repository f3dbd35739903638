// Per-target helpers shared by the Highway kernels (blockwise8, blockwise4, gemv4): exact element loads and stores,
// the absmax pass of a block, and small tables held in registers. Included once per target, after
// hwy/foreach_target.h and hwy/highway.h, in the usual Highway -inl.h way.
#if defined(BNB_CORE_HWY_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BNB_CORE_HWY_COMMON_INL_H_
#undef BNB_CORE_HWY_COMMON_INL_H_
#else
#define BNB_CORE_HWY_COMMON_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "bnb/core/bf16_codes.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/dtype.h"
#include "bnb/core/quotient.h"
#include "bnb/core/stream_stores.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

constexpr size_t kN = hn::MaxLanes(DF());

// x86 targets from AVX2 up have F16C, whose conversions round exactly as FloatToHalf does; elsewhere Highway
// 1.0's emulated narrowing is not round-to-nearest-even, so those targets narrow with the scalar routine.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3_ZEN4
constexpr bool kNativeHalf = true;
#else
constexpr bool kNativeHalf = false;
#endif

// x / a rounded, without a division where quotient.h claims the products (QuotientByProducts; inverse = 1 / a
// rounded, every lane). kGuarded: the lanes QuotientTakesDivision names take the true division (a within
// [kQuotientTiny, kQuotientHuge], which the caller checks once; a vector with none pays four comparisons); without,
// none do (float16 pairs, checked exhaustively). Only for targets with fused multiply-adds (AVX2 and up), which the
// exactness needs.
template <bool kGuarded>
HWY_INLINE VF QuotientByProducts(VF x, VF a, VF inverse) {
  const DF df;
  const VF q0 = hn::Mul(x, inverse);
  const VF q = hn::CopySign(hn::MulAdd(hn::NegMulAdd(q0, a, x), inverse, q0), x);
  if constexpr (!kGuarded) {
    return q;
  } else {
    const auto tiny = hn::Lt(hn::Min(hn::Abs(x), hn::Abs(q0)), hn::Set(df, kQuotientTiny));
    const auto divide = hn::Or(hn::Not(hn::IsFinite(q)), hn::AndNot(hn::Eq(x, hn::Zero(df)), tiny));
    return HWY_UNLIKELY(!hn::AllFalse(df, divide)) ? hn::IfThenElse(divide, hn::Div(x, a), q) : q;
  }
}

// Lanes(DF) elements of `kT` at base[i], widened exactly to float.
template <DType kT>
HWY_INLINE VF LoadF32(const void* base, int64_t i) {
  const DF df;
  if constexpr (kT == DType::kFloat32) {
    return hn::LoadU(df, static_cast<const float*>(base) + i);
  } else if constexpr (kT == DType::kBFloat16) {
    const auto bits = hn::PromoteTo(DU32(), hn::LoadU(DU16(), static_cast<const uint16_t*>(base) + i));
    return hn::BitCast(df, hn::ShiftLeft<16>(bits));
  } else if constexpr (kNativeHalf) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, static_cast<const hwy::float16_t*>(base) + i));
  } else {
    // Integer widening (Highway 1.0's emulated PromoteTo mishandles some inputs). Exponent and mantissa fit in
    // 15 bits, so signed compares (which every target has) order them.
    const DU32 du32;
    const DI di;
    const auto h = hn::PromoteTo(du32, hn::LoadU(DU16(), static_cast<const uint16_t*>(base) + i));
    const auto em = hn::And(h, hn::Set(du32, 0x7FFF));
    const auto sign = hn::ShiftLeft<16>(hn::Xor(h, em));
    const auto normal = hn::Add(hn::ShiftLeft<13>(em), hn::Set(du32, 112u << 23));  // rebias 15 -> 127
    const auto inf_nan = hn::Or(hn::ShiftLeft<13>(em), hn::Set(du32, 0x7F800000u));
    const VF subnormal = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, em)), hn::Set(df, 1.0f / 16777216.0f));
    const auto emi = hn::BitCast(di, em);
    auto bits = hn::IfThenElse(hn::RebindMask(du32, hn::Gt(emi, hn::Set(di, 0x7BFF))), inf_nan, normal);
    bits = hn::IfThenElse(hn::RebindMask(du32, hn::Lt(emi, hn::Set(di, 0x400))), hn::BitCast(du32, subnormal), bits);
    return hn::BitCast(df, hn::Or(bits, sign));
  }
}

// Stores Lanes(DF) floats to base[i] as `kT`, rounding to nearest even exactly as StoreFromFloat does.
// kNoNaN: the caller knows no lane is NaN (bfloat16 then skips the NaN fix-up).
template <DType kT, bool kNoNaN = false, bool kStream = false>
HWY_INLINE void StoreF32(VF v, void* base, int64_t i) {
  const DF df;
  if constexpr (kT == DType::kFloat32) {
    if constexpr (kStream) {
      hn::Stream(v, df, static_cast<float*>(base) + i);
    } else {
      hn::StoreU(v, df, static_cast<float*>(base) + i);
    }
  } else if constexpr (kT == DType::kBFloat16) {
    const DU32 du32;
    const auto bits = hn::BitCast(du32, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 1));
    auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du32, 0x7FFF), lsb)));
    if (!kNoNaN) rounded = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), hn::Set(du32, 0x7FC0), rounded);
    // Lanes hold 16-bit values: the signed narrowing (all targets have it) keeps them.
    const auto narrow = hn::DemoteTo(DU16(), hn::BitCast(DI(), rounded));
    if constexpr (kStream) {
      hn::Stream(narrow, DU16(), static_cast<uint16_t*>(base) + i);
    } else {
      hn::StoreU(narrow, DU16(), static_cast<uint16_t*>(base) + i);
    }
  } else if constexpr (kNativeHalf) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, static_cast<hwy::float16_t*>(base) + i);
  } else {
    HWY_ALIGN float tmp[kN];
    hn::Store(v, df, tmp);
    for (size_t k = 0; k < hn::Lanes(df); ++k) {
      StoreFromFloat(DType::kFloat16, base, i + static_cast<int64_t>(k), tmp[k]);
    }
  }
}

// The absmax whose magnitude bits (the largest of the elements', sign cleared) are `bits`: NaN when they are a NaN's.
template <class T>
HWY_INLINE float AbsmaxFromBits(DType dtype, T bits) {
  const float amax = LoadAsFloat(dtype, &bits, 0);
  return std::isnan(amax) ? NAN : amax;
}

// The absmax of elements [lo, hi) of x, by the rule of blockwise8.h: max |x|, or NaN when any element is NaN.
// Works on the bits: with the sign cleared, integer order is float order and every NaN lies above +inf, so an
// integer max finds both at once, 16-bit inputs sixteen lanes at a time and without widening.
template <DType kT>
HWY_INLINE float BlockAbsmax(const void* x, int64_t lo, int64_t hi) {
  using T = std::conditional_t<kT == DType::kFloat32, int32_t, int16_t>;
  constexpr T kMagnitude = static_cast<T>(kT == DType::kFloat32 ? 0x7FFFFFFF : 0x7FFF);
  const hn::ScalableTag<T> d;
  const T* p = static_cast<const T*>(x);
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vec_end = lo + (hi - lo) / N * N;
  const auto mask = hn::Set(d, kMagnitude);
  auto vmax = hn::Zero(d);
  for (int64_t i = lo; i < vec_end; i += N) vmax = hn::Max(vmax, hn::And(hn::LoadU(d, p + i), mask));
  T bits = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (int64_t i = vec_end; i < hi; ++i) bits = std::max(bits, static_cast<T>(LoadElement<T>(x, i) & kMagnitude));
  return AbsmaxFromBits(kT, bits);
}

// Whether an op that reads and writes `moved` bytes in all streams its output at `out` (stream_stores.h); never on
// the scalar target.
HWY_INLINE bool StreamableOutput(const void* out, int64_t moved) {
  return HWY_TARGET != HWY_SCALAR && StreamsOutput(out, moved);
}

// Hints the cache to fetch the bytes of elements [i, i + n) of x; safe past the end (prefetches never fault).
template <DType kT>
HWY_INLINE void PrefetchElements(const void* x, int64_t i, int64_t n) {
  constexpr int64_t kSize = DTypeSize(kT);
  const char* p = static_cast<const char*>(x) + i * kSize;
  for (int64_t off = 0; off < n * kSize; off += 64) hwy::Prefetch(p + off);
}

// How far ahead of its reads a kernel that streams its input from memory prefetches it: at least 8 KB. One block
// ahead (128-256 bytes at blocksize 64), or the hardware prefetcher alone, left a core's stream at half its rate on
// Sapphire / Emerald Rapids (tools/bench/NOTES.md, 'Quantize: prefetching the input 8 KB ahead').
inline constexpr int64_t kStreamAheadBytes = 8192;

// The prefetch distance, in elements, of a kernel that would prefetch the next block of `blocksize` elements.
template <DType kT>
HWY_INLINE int64_t StreamAhead(int64_t blocksize) {
  return std::max<int64_t>(blocksize, kStreamAheadBytes / DTypeSize(kT));
}

// Bf16Codes::Index for the elements of blocks with one absmax, a vector of bfloat16 bits at a time.
struct Bf16IndexRule {
  using D16 = hn::ScalableTag<uint16_t>;
  hn::Vec<D16> bottom2;

  Bf16IndexRule(uint16_t amax_bits, int rows)
      : bottom2(hn::Set(D16(), static_cast<uint16_t>(2 * Bf16Codes::Bottom(amax_bits, rows)))) {}

  // Stores the indices of the Lanes(D16) values at x to index.
  HWY_INLINE void Store(const uint16_t* x, uint16_t* index) const {
#if HWY_TARGET == HWY_SCALAR
    // In 16-bit arithmetic, which GCC packs across a chunk's unrolled calls into SSE2 code; Highway's one-lane
    // SaturatedSub it widened to 32 bits, which is slower (figures: tools/bench/NOTES.md,
    // 'Scalar target: bfloat16 index rule').
    const uint16_t x0 = LoadElement<uint16_t>(x, 0);
    const uint16_t m = static_cast<uint16_t>(x0 << 1 | x0 >> 15), b = hn::GetLane(bottom2);
    const uint16_t d = static_cast<uint16_t>(m - b);
    index[0] = m >= b ? d : uint16_t{0};
    return;
#endif
    const D16 d16;
    const auto h = hn::LoadU(d16, x);
    const auto magnitude_and_sign = hn::Or(hn::Add(h, h), hn::ShiftRight<15>(h));  // Add(h, h) drops the sign
    hn::StoreU(hn::SaturatedSub(magnitude_and_sign, bottom2), d16, index);
  }
};

// The targets that look table entries up by scalar loads assembled in vectors (gathers are slower there: Zen 3's,
// and the emulated ones below AVX2); evaluated per target, where used.
#ifndef BNB_SCALAR_LOAD_LOOKUPS
#define BNB_SCALAR_LOAD_LOOKUPS (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3)
#endif

#if BNB_SCALAR_LOAD_LOOKUPS
// The 32-bit word at p, unaligned: a pair of 16-bit indices, or four byte codes, for the scalar-load lookups.
HWY_INLINE uint32_t LoadWord(const void* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// The 64-bit word at p, unaligned: a pair of 32-bit values, or four 16-bit indices, split in general registers.
HWY_INLINE uint64_t LoadPair(const void* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}
#endif

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4
// table[i0], table[i1], table[i2], table[i3] in a 128-bit vector: a plain load for the first, pinsrd for the rest
// (the x86 targets' stand-in for a gather, which Zen 3 runs slower).
HWY_INLINE __m128i LoadInsert4(const int32_t* table, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  __m128i v = _mm_cvtsi32_si128(table[i0]);
  v = _mm_insert_epi32(v, table[i1], 1);
  v = _mm_insert_epi32(v, table[i2], 2);
  return _mm_insert_epi32(v, table[i3], 3);
}

// The 16 codes table[index[k]] in a vector, the indices kPerWord (2 or 4) to a scalar load (kWords: 0 to
// 16 / kPerWord - 1). A word's first index is its low 16 bits, its last the rest after a shift, and a quad's middle
// two come by BMI1's bextr (the AVX2 target's; quads are for it alone). The first code comes by a plain load, the
// rest by inserts: inserting the first too, into a zeroed vector, is slower (figures: tools/bench/NOTES.md,
// 'bfloat16 code lookups').
template <int kPerWord, size_t... kWords>
HWY_INLINE __m128i CodesByWords(const uint16_t* index, const uint8_t* table, std::index_sequence<kWords...>) {
  using Word = std::conditional_t<kPerWord == 4, uint64_t, uint32_t>;
  __m128i v = _mm_undefined_si128();
  const auto insert_word = [&](auto word) {
    constexpr int k = decltype(word)::value;
    Word w;
    if constexpr (kPerWord == 4) {
      w = LoadPair(index + kPerWord * k);
    } else {
      w = LoadWord(index + kPerWord * k);
    }
    const auto insert = [&](auto field) {
      constexpr int j = decltype(field)::value;
      Word i;  // of the word's width: narrowing bextr's result cost a zero-extension per index
      if constexpr (j == 0) {
        i = w & 0xFFFF;
      } else if constexpr (j == kPerWord - 1) {
        i = w >> (16 * j);
      } else {
        i = _bextr_u64(w, 16 * j, 16);
      }
      if constexpr (k == 0 && j == 0) {
        v = _mm_cvtsi32_si128(table[i]);
      } else {
        v = _mm_insert_epi8(v, table[i], kPerWord * k + j);
      }
    };
    insert(std::integral_constant<int, 0>{});
    if constexpr (kPerWord == 4) {
      insert(std::integral_constant<int, 1>{});
      insert(std::integral_constant<int, 2>{});
    }
    insert(std::integral_constant<int, kPerWord - 1>{});
  };
  (insert_word(std::integral_constant<int, kWords>{}), ...);
  return v;
}
#endif

// out[k] = table[index[k]] for k < 16: one gather on AVX-512; elsewhere one byte load per element, the bytes
// inserted into a vector where the target has pinsrb (AVX2, SSE4), else four codes to a 32-bit store; either beats
// storing fewer codes at a time. The indices must not have been stored just before: scalar loads of indices that a
// vector store has just written stall, so reading each vector's indices right after storing them, or straight out
// of the vector, is much slower. Figures: tools/bench/NOTES.md, 'bfloat16 code lookups'. kStream: out is 16-byte
// aligned, and written by a streaming store where the target assembles the 16 bytes in a vector.
template <bool kStream = false>
HWY_INLINE void LookupCodes16(const uint16_t* index, const uint8_t* table, uint8_t* out) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4
#if HWY_TARGET == HWY_AVX2
  // Loads bound this loop (one per element for the table, the rest for the indices), so AVX2 reads the indices
  // four to a load, where BMI1's bextr splits them in as few instructions as pairs take (shifts and masks take
  // more). Figures: tools/bench/NOTES.md, 'bfloat16 code lookups'.
  const __m128i v = CodesByWords<4>(index, table, std::make_index_sequence<4>{});
#else
  // Indices two to a 32-bit load, split by a zero-extension and a shift: fewer instructions per element than
  // 16-bit loads (one each) or, without BMI1 (not part of SSE4), 64-bit ones split by shifts and masks. Each pair
  // is loaded where it is used: one 32-byte copy of all sixteen compiles to slower vector extracts. Figures:
  // tools/bench/NOTES.md, 'bfloat16 code lookups'.
  const __m128i v = CodesByWords<2>(index, table, std::make_index_sequence<8>{});
#endif
  if constexpr (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), v);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
  }
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // One 16-lane gather of the 32-bit words at the codes (Bf16Codes pads its tables so the last one's word is in
  // bounds), each word's low byte kept: on Intel's cores gathers beat scalar loads and inserts (figures:
  // tools/bench/NOTES.md, 'bfloat16 8-bit quantize by gather').
  const __m512i i32 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(index)));
  const __m128i v = _mm512_cvtepi32_epi8(_mm512_i32gather_epi32(i32, table, 1));
  if constexpr (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), v);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
  }
#else
  for (int k = 0; k < 16; k += 4) {
    const uint32_t w = uint32_t{table[index[k]]} | uint32_t{table[index[k + 1]]} << 8 |
                       uint32_t{table[index[k + 2]]} << 16 | uint32_t{table[index[k + 3]]} << 24;
    std::memcpy(out + k, &w, 4);
  }
#endif
}

// out[k] = table[index[k]] for k < n, as LookupCodes16 does.
HWY_INLINE void LookupCodes(const uint16_t* index, int64_t n, const uint8_t* table, uint8_t* out) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) LookupCodes16(index + k, table, out + k);
  for (; k < n; ++k) out[k] = table[index[k]];
}

// Codes of bfloat16 blocks by their Bf16Codes tables, for a run of consecutive blocks of at most kMaxBlocksize
// elements in all: Add() stores a block's indices (Bf16IndexRule), Finish() looks them all up (LookupCodes), after
// the run's indices are all stored. The 4-bit quantize's way; the 8-bit one overlaps these steps with the next
// blocks' absmax pass instead (QuantizeBf16Pipelined, blockwise8_hwy.cc), which its caller would have to follow.
class Bf16TableRun {
 public:
  // Takes elements [lo, hi) of x, a block with absmax `amax`, to be coded into out[0, hi - lo) by the block's table
  // (finishing the run first when the block does not fit it); false, taking nothing, when the block must be
  // searched instead: no tables (null `codes`), absmax 0 or not finite, or an absmax the tables do not serve.
  // `prefetch`: bring in the elements kPrefetchAhead on meanwhile (more blocks follow in the caller's range).
  HWY_INLINE bool TryAdd(const Bf16Codes* codes, Bf16Codes::Fill fill, const uint16_t* x, int64_t lo, int64_t hi,
                         float amax, bool prefetch, uint8_t* out) {
    const uint8_t* table = codes != nullptr ? codes->TableFor(amax, fill) : nullptr;
    if (table == nullptr) return false;
    if (used_ + (hi - lo) > kMaxBlocksize) Finish();
    Add(x, lo, hi, Bf16Codes::AbsmaxBits(amax), codes->rows(), table, prefetch, out);
    return true;
  }

  HWY_INLINE void Finish() {
    for (int b = 0; b < count_; ++b) {
      LookupCodes(index_ + blocks_[b].begin, blocks_[b].n, blocks_[b].table, blocks_[b].out);
    }
    count_ = 0;
    used_ = 0;
  }

 private:
  struct Block {
    int64_t begin, n;
    const uint8_t* table;
    uint8_t* out;
  };

  HWY_INLINE void Add(const uint16_t* x, int64_t lo, int64_t hi, uint16_t amax_bits, int rows, const uint8_t* table,
                      bool prefetch, uint8_t* out) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(Bf16IndexRule::D16()));
    const Bf16IndexRule rule(amax_bits, rows);
    uint16_t* index = index_ + used_;
    int64_t i = lo;
    for (; i + N <= hi; i += N) {
      if (prefetch) PrefetchElements<DType::kBFloat16>(x, i + kPrefetchAhead, N);
      rule.Store(x + i, index + (i - lo));
    }
    for (; i < hi; ++i) {
      index[i - lo] = static_cast<uint16_t>(Bf16Codes::Index(amax_bits, rows, LoadElement<uint16_t>(x, i)));
    }
    blocks_[count_++] = Block{used_, hi - lo, table, out};
    used_ += hi - lo;
  }

  // Two runs ahead: a block's absmax pass comes right after the previous block's Add, and a run's Finish, the long
  // part, comes later still, so prefetches one block ahead would not have landed when the absmax pass reads them
  // (figures: tools/bench/NOTES.md, 'Bf16TableRun prefetch distance').
  static constexpr int64_t kPrefetchAhead = 2 * kMaxBlocksize;

  HWY_ALIGN uint16_t index_[kMaxBlocksize];
  Block blocks_[kMaxBlocksize / kMinBlocksize];
  int count_ = 0;
  int64_t used_ = 0;
};

// Bf16TableRun for bfloat16 input, else nothing: its 12 KB of buffers would also shift the other inputs' stack
// layout, where buffer stores and input loads can alias by their addresses' low 12 bits (4K aliasing; it slowed
// SSE4's float32 4-bit quantize: tools/bench/NOTES.md, '4-bit quantize: stack layout').
struct NoBf16Tables {
  void Finish() {}
};
template <DType kT>
using Bf16TableRunFor = std::conditional_t<kT == DType::kBFloat16, Bf16TableRun, NoBf16Tables>;

#if HWY_TARGET != HWY_SCALAR
// A table of kEntries floats (a power of two, at most 16) held in registers and looked up per lane.
template <size_t kEntries>
struct RegTable {
  static constexpr size_t kRegs = kEntries > kN ? kEntries / kN : 1;
  VF reg[kRegs];

  static RegTable FromArray(const float* entries) {
    HWY_ALIGN float buf[kRegs * kN] = {};
    std::copy(entries, entries + kEntries, buf);
    RegTable t;
    for (size_t k = 0; k < kRegs; ++k) t.reg[k] = hn::Load(DF(), buf + k * kN);
    return t;
  }

  // Entry idx of each lane; idx in [0, kEntries).
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
#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace bnb::core
HWY_AFTER_NAMESPACE();

#endif  // BNB_CORE_HWY_COMMON_INL_H_
