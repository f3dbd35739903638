// Vectorized blockwise 8-bit kernels, compiled once per instruction set by Highway and picked at run time; the
// quantize coders (value -> code) are in blockwise8_coders-inl.h. Every per-element rule (scaling, nearest code,
// rounding) is the scalar one of blockwise8.h / codebook.h; blocks whose absmax is 0, inf or NaN, and vector
// tails, take the scalar code path directly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/blockwise8_x86.h"
#include "bnb/core/cpu_isa.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bnb/core/blockwise8_hwy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "bnb/core/hwy_common-inl.h"
#include "bnb/core/blockwise8_coders-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bnb::core {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// StreamableOutput for an 8-bit op over n elements of kT: it moves their n * size bytes and n codes.
template <DType kT>
HWY_INLINE bool StreamableOutput8(const void* out, int64_t n) {
  return StreamableOutput(out, n * (DTypeSize(kT) + 1));
}

// run(std::true_type{}) and then the fence streaming stores need when `stream`, else run(std::false_type{}): the
// kernels take kStream as that argument's value.
template <class Run>
HWY_INLINE void RunStreamedIf(bool stream, const Run& run) {
  if (stream) {
    run(std::true_type{});
    hwy::FlushStream();
  } else {
    run(std::false_type{});
  }
}

// float16 blocks scaled without a division (QuotientByProducts, exact for float16 with no guard) where that
// measured faster: AVX-512 on Intel (its 8-bit quantize runs there alone), whose vdivps issues every ~10 cycles:
// ~13% faster at blocksize 256 and 4096 (tools/bench/NOTES.md, 'float16 8-bit quantize: the quotient by products').
// float32 and bfloat16, which need the guard, measured slower by it: the division overlaps the lookups ('The 8-bit
// optimizer step: the bias correction by products').
constexpr bool kF16QuotientByProducts = HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL;

// Codes of block [lo, hi) of x, whose absmax is amax, by `coder` (and the scalar rule for the last elements);
// `prefetch`: also bring in the elements one block on, which the caller reads next. kStream: groups of four vectors
// by the coder's Stream4 (codes + lo 64-byte aligned; the caller flushes).
template <DType kT, class Coder, bool kStream = false>
HWY_INLINE void CodeBlock(const void* x, const Coder& coder, int64_t lo, int64_t hi, int64_t blocksize, float amax,
                          bool prefetch, uint8_t* codes) {
  const PreparedCodebook& cb = coder.cb;
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t vec4_end = lo + (hi - lo) / (4 * N) * (4 * N);
  const int64_t vec_end = lo + (hi - lo) / N * N;
  int64_t i = lo;
  if (std::isfinite(amax) && amax != 0.0f) {
    const VF vscale = hn::Set(df, amax);
    constexpr bool kByProducts = kF16QuotientByProducts && kT == DType::kFloat16;
    const VF vinverse = hn::Set(df, kByProducts ? 1.0f / amax : 0.0f);  // no division per block where unused
    // Four vectors per step: their divisions and lookups are independent, so they overlap.
    // The next block's absmax pass then reads from cache while this loop computes.
    const auto scaled = [&](int64_t j) {
      const VF v = LoadF32<kT>(x, j);
      if constexpr (kByProducts) {
        return QuotientByProducts</*kGuarded=*/false>(v, vscale, vinverse);
      } else {
        return hn::Div(v, vscale);
      }
    };
    for (; i < vec4_end; i += 4 * N) {
      if (prefetch) PrefetchElements<kT>(x, i + StreamAhead<kT>(blocksize), 4 * N);
      if constexpr (kStream) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
        coder.Stream4(scaled(i), scaled(i + N), scaled(i + 2 * N), scaled(i + 3 * N), codes + i);
#endif
      } else {
        coder.Store4(scaled(i), scaled(i + N), scaled(i + 2 * N), scaled(i + 3 * N), codes + i);
      }
    }
    for (; i < vec_end; i += N) coder.Store(scaled(i), codes + i);
  }
  for (; i < hi; ++i) codes[i] = NearestCode(cb, ScaleToUnit(LoadAsFloat(kT, x, i), amax));
}

// For each block [lo, hi) of r: its absmax into absmax[b], then code(lo, hi, absmax[b], more), `more` when another
// block of the range follows (whose elements the coder may prefetch).
template <DType kT, class Code>
HWY_INLINE void QuantizeEachBlock(const void* x, const Blockwise8Range& r, float* absmax, const Code& code) {
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    absmax[b] = BlockAbsmax<kT>(x, lo, hi);
    code(lo, hi, absmax[b], b + 1 < r.block_end);
  }
}

// kStream (AVX-512's BucketCoder): the codes stream, 64 at a time, where every block holds whole groups of four
// vectors from an aligned start: no read of each code line before it is written (float32 8-bit quantize from memory
// 5-12% faster, bfloat16 blocks of 64 8-10%: tools/bench/NOTES.md, 'Streamed codes of the Intel 8-bit quantize').
template <DType kT, class Coder>
void QuantizeBlocks(const void* x, const Coder& coder, const Blockwise8Range& r, uint8_t* codes, float* absmax) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (std::is_same_v<Coder, BucketCoder>) {
    constexpr int64_t kGroup = 4 * static_cast<int64_t>(kN);
    if (!coder.cb.needs_search && r.blocksize % kGroup == 0 && StreamableOutput8<kT>(codes, r.n)) {
      QuantizeEachBlock<kT>(x, r, absmax, [&](int64_t lo, int64_t hi, float amax, bool more) {
        CodeBlock<kT, Coder, /*kStream=*/true>(x, coder, lo, hi, r.blocksize, amax, more, codes);
      });
      hwy::FlushStream();
      return;
    }
  }
#endif
  QuantizeEachBlock<kT>(x, r, absmax, [&](int64_t lo, int64_t hi, float amax, bool more) {
    CodeBlock<kT>(x, coder, lo, hi, r.blocksize, amax, more, codes);
  });
}

#if BNB_SCALAR_LOAD_LOOKUPS
// The codes of the 4 * Lanes(DF) quantized values whose bits are at q (HalfBucketCodes) to out. A function, not a
// lambda: GCC left a lambda out of line (a call per 32 elements).
template <bool kStream>
HWY_INLINE void StoreHalfBucketCodes4(const int32_t* entries, const uint32_t* q, uint8_t* out) {
  constexpr int64_t N = static_cast<int64_t>(kN);
  StoreBytes4<kStream>(HalfBucketCodes(entries, q), HalfBucketCodes(entries, q + N),
                       HalfBucketCodes(entries, q + 2 * N), HalfBucketCodes(entries, q + 3 * N), out);
}

// CodeBlock's work by HalfBuckets, for float32 and float16 blocks: over chunks of kChunk elements, the quotients
// x / amax of chunk c are stored (their bits) while those of chunk c - 1 are looked up (HalfBucketCodes), so no
// lookup reads quotients stored just before. Exact by construction, with no lanes to redo. Both stages run in one
// loop, four vectors of each per step, so the divisions overlap the lookups, which with HalfBucketCodes' 64-bit
// bucket loads then bound it (a chunk of divisions, then a chunk of lookups, would run mostly one after the other;
// the interleaving and the 64-bit loads pay only together). Figures: tools/bench/NOTES.md, 'Half-bucket quantize'.
// kStream: the codes are StreamableOutput's, and whole groups of four vectors stream (figures:
// tools/bench/NOTES.md, 'Streaming stores'). The caller ends with hwy::FlushStream().
template <DType kT, bool kStream>
HWY_INLINE void CodeBlockByHalfBuckets(const void* x, const PreparedCodebook& cb, int64_t lo, int64_t hi,
                                       int64_t blocksize, float amax, bool prefetch, uint8_t* out) {
  // The chunk length that measured best for each vector width (tools/bench/NOTES.md, 'Half-bucket quantize').
  constexpr int64_t kChunk = kN >= 8 ? 128 : 64;
  constexpr int64_t N = static_cast<int64_t>(kN);  // x86 vectors have a fixed length
  constexpr int64_t kGroup = 4 * N;
  const DF df;
  const DU32 du32;
  int64_t done = 0;
  if (std::isfinite(amax) && amax != 0.0f) {
    HWY_ALIGN uint32_t ring[2 * kChunk];  // chunk c's quotient bits at ring + (c % 2) * kChunk
    // Locals, not captures by reference, for what the loops read: GCC reloaded captures after every store.
    const int32_t* entries = cb.half_buckets.entries.data();
    const VF vscale = hn::Set(df, amax);
    const char* xb = static_cast<const char*>(x) + lo * DTypeSize(kT);
    const int64_t vec_n = (hi - lo) / N * N;
    const int64_t chunks = (vec_n + kChunk - 1) / kChunk;
    const auto quotients = [vscale, du32](const char* xc, int64_t j, uint32_t* q) {
      hn::Store(hn::BitCast(du32, hn::Div(LoadF32<kT>(xc, j), vscale)), du32, q + j);
    };
    // Chunk c's quotients and chunk c - 1's codes; `whole` (a std::bool_constant): both chunks are kChunk elements
    // long, so the loops have fixed trip counts.
    const auto step = [&](int64_t c, auto whole) {
      const int64_t begin = c * kChunk;
      const char* xc = xb + begin * DTypeSize(kT);
      uint32_t* q = ring + (c % 2) * kChunk;
      const uint32_t* q_prev = ring + ((c + 1) % 2) * kChunk;
      if (prefetch && (whole || c < chunks)) PrefetchElements<kT>(x, lo + begin + StreamAhead<kT>(blocksize), kChunk);
      if constexpr (decltype(whole)::value) {
        uint8_t* o = out + begin - kChunk;
        for (int64_t j = 0; j < kChunk; j += kGroup) {
          for (int64_t k = j; k < j + kGroup; k += N) quotients(xc, k, q);
          StoreHalfBucketCodes4<kStream>(entries, q_prev + j, o + j);
        }
        return;
      }
      if (c < chunks) {
        const int64_t n = std::min(kChunk, vec_n - begin);
        for (int64_t j = 0; j < n; j += N) quotients(xc, j, q);
      }
      if (c >= 1) {
        uint8_t* o = out + begin - kChunk;
        const int64_t n = std::min(kChunk, vec_n - (begin - kChunk));
        int64_t j = 0;
        for (; j + kGroup <= n; j += kGroup) StoreHalfBucketCodes4<kStream>(entries, q_prev + j, o + j);
        for (; j < n; j += N) hn::StoreU(hn::DemoteTo(DU8(), HalfBucketCodes(entries, q_prev + j)), DU8(), o + j);
      }
    };
    const int64_t whole_end = vec_n / kChunk;  // chunks c with c and c - 1 both whole: [1, whole_end)
    step(0, std::false_type{});                 // chunk 0's quotients; no codes before them
    int64_t c = 1;
    for (; c < whole_end; ++c) step(c, std::true_type{});
    for (; c < chunks + 1; ++c) step(c, std::false_type{});
    done = vec_n;
  }
  for (int64_t k = done; k < hi - lo; ++k) out[k] = NearestCode(cb, ScaleToUnit(LoadAsFloat(kT, x, lo + k), amax));
}

template <DType kT, bool kStream>
void QuantizeBlocksByHalfBuckets(const void* x, const PreparedCodebook& cb, const Blockwise8Range& r,
                                 uint8_t* codes, float* absmax) {
  QuantizeEachBlock<kT>(x, r, absmax, [&](int64_t lo, int64_t hi, float amax, bool more) {
    CodeBlockByHalfBuckets<kT, kStream>(x, cb, lo, hi, r.blocksize, amax, more, codes + lo);
  });
}
#endif

// bfloat16 blocks coded by their Bf16Codes tables, in groups of consecutive blocks (kMaxBlocksize elements, but the
// range's last group), as a three-stage pipeline: pass s over the positions of a group takes the absmax of group s,
// the indices (Bf16IndexRule) of group s - 1, whose absmax pass s - 1 found, and the codes (LookupCodes) of group
// s - 2, whose indices pass s - 1 stored. Loading fresh input among the other stages' work keeps memory busy where
// separate passes block by block (absmax, indices, lookups) leave it idle between bursts: it pays on input read
// from memory in large blocks; in cache it is even, and for blocks of 64 a little slower (figures:
// tools/bench/NOTES.md, 'bfloat16 8-bit quantize pipeline'). Blocks whose absmax is 0 or not finite, or one the
// tables do not serve, are coded by `coder` as soon as their absmax is known. kStream: the codes are
// StreamableOutput's and stream; the caller ends with hwy::FlushStream().
template <bool kStream, class Coder>
void QuantizeBf16Pipelined(const uint16_t* x, const Coder& coder, const Blockwise8Range& r, uint8_t* codes,
                           float* absmax) {
  constexpr int64_t kChunk = kMinBlocksize;  // every block but the range's last is whole chunks
  constexpr int64_t kGroupBlocks = kMaxBlocksize / kMinBlocksize;
  const PreparedCodebook& cb = coder.cb;
  const Bf16Codes& tables = *cb.bf16_codes;
  const auto fill = [&cb](float a, const float* v, int64_t n, uint8_t* c) { QuantizeByAbsmax8(cb, a, v, n, c); };
  const hn::ScalableTag<int16_t> d16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d16));
  const int64_t bs = r.blocksize, per_group = kMaxBlocksize / bs;
  const int64_t groups = (r.block_end - r.block_begin + per_group - 1) / per_group;
  const int rows = tables.rows();
  // By group number mod 3 (three groups in flight): each block's table (null: coded by `coder`) and absmax bits.
  const uint8_t* table[3][kGroupBlocks];
  uint16_t amax_bits[3][kGroupBlocks];
  // By group number mod 2, 2 KB apart modulo 4 KB: the index stage stores to one at the offset where the lookup
  // stage then loads from the other, and 8 KB apart (the same low 12 bits), such loads wait on those stores' full
  // addresses (4K aliasing; figures: tools/bench/NOTES.md, 'bfloat16 8-bit quantize pipeline').
  HWY_ALIGN uint16_t index[2][kMaxBlocksize + 1024];

  // Block j of group g: its elements [lo, hi), empty when outside the range.
  const auto bounds = [&](int64_t g, int64_t j, int64_t* lo, int64_t* hi) {
    const int64_t b = r.block_begin + g * per_group + j;
    const bool in = g >= 0 && g < groups && j < per_group && b < r.block_end;
    *lo = in ? b * bs : 0;
    *hi = in ? std::min(*lo + bs, r.n) : 0;
  };
  for (int64_t s = 0; s < groups + 2; ++s) {
    // Stage a: group s, absmax; stage i: group s - 1, indices; stage l: group s - 2, codes.
    const int64_t ga = s % 3, gi = (s + 2) % 3, gl = (s + 1) % 3;
    uint16_t* i_index = index[(s + 1) % 2];
    const uint16_t* l_index = index[s % 2];
    for (int64_t j = 0; j < per_group; ++j) {
      int64_t a_lo, a_hi, i_lo, i_hi, l_lo, l_hi;
      bounds(s, j, &a_lo, &a_hi);
      bounds(s - 1, j, &i_lo, &i_hi);
      bounds(s - 2, j, &l_lo, &l_hi);
      if (a_lo == a_hi && i_lo == i_hi && l_lo == l_hi) break;  // and so for every later block
      if (i_lo < i_hi && table[gi][j] == nullptr) i_hi = i_lo;   // coded by `coder`
      if (l_lo < l_hi && table[gl][j] == nullptr) l_hi = l_lo;
      const uint16_t i_bits = i_lo < i_hi ? amax_bits[gi][j] : 0;
      const Bf16IndexRule rule(i_bits, rows);
      const uint8_t* l_table = l_lo < l_hi ? table[gl][j] : nullptr;
      uint16_t* ij = i_index + j * bs;
      const uint16_t* lj = l_index + j * bs;
      const int16_t* xa = reinterpret_cast<const int16_t*>(x) + a_lo;
      const int64_t a_chunks = (a_hi - a_lo) / kChunk, i_chunks = (i_hi - i_lo) / kChunk;
      const int64_t l_chunks = (l_hi - l_lo) / kChunk;
      const int64_t chunks = std::max(a_chunks, std::max(i_chunks, l_chunks));
      const auto magnitude = hn::Set(d16, 0x7FFF);
      auto vmax = hn::Zero(d16);
      // Chunk c of each stage's block; `every` (a std::bool_constant): all three have one.
      const auto step = [&](int64_t c, auto every) {
        const int64_t off = c * kChunk;
        if (every || c < a_chunks) {
          PrefetchElements<DType::kBFloat16>(xa, off + kMaxBlocksize, kChunk);
          for (int64_t k = 0; k < kChunk; k += L) {
            vmax = hn::Max(vmax, hn::And(hn::LoadU(d16, xa + off + k), magnitude));
          }
        }
        if (every || c < i_chunks) {
          for (int64_t k = 0; k < kChunk; k += L) rule.Store(x + i_lo + off + k, ij + off + k);
        }
        if (every || c < l_chunks) {
          for (int64_t k = 0; k < kChunk; k += 16) {
            LookupCodes16<kStream>(lj + off + k, l_table, codes + l_lo + off + k);
          }
        }
      };
      if (a_chunks == chunks && i_chunks == chunks && l_chunks == chunks) {
        for (int64_t c = 0; c < chunks; ++c) step(c, std::true_type{});
      } else {
        for (int64_t c = 0; c < chunks; ++c) step(c, std::false_type{});
      }
      // The range's last block may end inside a chunk.
      for (int64_t k = i_chunks * kChunk; k < i_hi - i_lo; ++k) {
        ij[k] = static_cast<uint16_t>(Bf16Codes::Index(i_bits, rows, LoadElement<uint16_t>(x, i_lo + k)));
      }
      if (l_chunks * kChunk < l_hi - l_lo) {
        const int64_t done = l_chunks * kChunk;
        LookupCodes(lj + done, (l_hi - l_lo) - done, l_table, codes + l_lo + done);
      }
      if (a_lo == a_hi) continue;
      int16_t bits = hn::GetLane(hn::MaxOfLanes(d16, vmax));
      for (int64_t k = a_chunks * kChunk; k < a_hi - a_lo; ++k) {
        bits = std::max<int16_t>(bits, LoadElement<int16_t>(xa, k) & 0x7FFF);
      }
      const float amax = AbsmaxFromBits(DType::kBFloat16, bits);
      absmax[a_lo / bs] = amax;
      amax_bits[ga][j] = Bf16Codes::AbsmaxBits(amax);
      table[ga][j] = tables.TableFor(amax, fill);
      if (table[ga][j] == nullptr) CodeBlock<DType::kBFloat16>(x, coder, a_lo, a_hi, bs, amax, false, codes);
    }
  }
}

// bfloat16 blocks larger than the pipeline's groups (blocksize above kMaxBlocksize, CPU only): each block's absmax,
// then its elements kMaxBlocksize at a time by its table (Bf16TableRun), or by `coder` where the tables do not
// serve its absmax.
template <class Coder>
void QuantizeBf16LargeBlocks(const uint16_t* x, const Coder& coder, const Blockwise8Range& r, uint8_t* codes,
                             float* absmax) {
  const PreparedCodebook& cb = coder.cb;
  const auto fill = [&cb](float a, const float* v, int64_t n, uint8_t* c) { QuantizeByAbsmax8(cb, a, v, n, c); };
  Bf16TableRun run;
  QuantizeEachBlock<DType::kBFloat16>(x, r, absmax, [&](int64_t lo, int64_t hi, float amax, bool more) {
    for (int64_t s = lo; s < hi; s += kMaxBlocksize) {
      const int64_t e = std::min(s + kMaxBlocksize, hi);
      if (!run.TryAdd(cb.bf16_codes.get(), fill, x, s, e, amax, more || e < hi, codes + s)) {
        CodeBlock<DType::kBFloat16>(x, coder, s, e, kMaxBlocksize, amax, more || e < hi, codes);
      }
    }
  });
  run.Finish();
}

// bfloat16 blocks from this size on are coded by their Bf16Codes tables. AVX-512 (run on Intel alone) gathers from
// them, and blocks of 64 each gather from a different one of the 128 tables (768 KB), missing L1: its BucketCoder
// (a division and a gather from one shared table) ran ~10% faster there, and even at 128 (figures:
// tools/bench/NOTES.md, 'bfloat16 8-bit quantize by gather'). The other targets' tables win at every size.
constexpr int64_t kBf16TablesFrom = HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL ? 128 : 0;

template <DType kT, class Coder>
void QuantizeWith(const void* x, const Coder& coder, const Blockwise8Range& r, uint8_t* codes, float* absmax) {
  if constexpr (kT == DType::kBFloat16) {
    if (r.blocksize > kMaxBlocksize) {
      return QuantizeBf16LargeBlocks(static_cast<const uint16_t*>(x), coder, r, codes, absmax);
    }
    if (coder.cb.bf16_codes != nullptr && r.blocksize >= kBf16TablesFrom) {
      const auto* x16 = static_cast<const uint16_t*>(x);
      RunStreamedIf(StreamableOutput8<kT>(codes, r.n), [&](auto stream) {
        QuantizeBf16Pipelined<decltype(stream)::value>(x16, coder, r, codes, absmax);
      });
      return;
    }
  }
  QuantizeBlocks<kT>(x, coder, r, codes, absmax);
}

template <DType kT>
void QuantizeT(const void* x, const PreparedCodebook& cb, const Blockwise8Range& r, uint8_t* codes,
               float* absmax) {
#if BNB_SCALAR_LOAD_LOOKUPS
  if constexpr (kT != DType::kBFloat16) {
    if (!cb.half_buckets.entries.empty()) {
      return RunStreamedIf(StreamableOutput8<kT>(codes, r.n), [&](auto stream) {
        QuantizeBlocksByHalfBuckets<kT, decltype(stream)::value>(x, cb, r, codes, absmax);
      });
    }
  }
#endif
  QuantizeWith<kT>(x, BucketCoder{cb}, r, codes, absmax);
}

#if BNB_SCALAR_LOAD_LOOKUPS
// Lanes(DF) entries of the 256-entry table t for the codes at `codes`: scalar loads assembled in a vector. Gathers
// (Zen 3's, or the emulated ones below AVX2) are slower. The codes are read four to a 32-bit load and split in
// general registers (faster than a load per code), and the entries go in by pinsrd where the target has it, faster
// than the compiler's assembly of _mm256_setr_ps / _mm_setr_ps (SSSE3, without pinsrd, keeps it). Figures:
// tools/bench/NOTES.md, '8-bit dequantize: code value lookups'.
HWY_INLINE VF LookupLanes(const float* t, const uint8_t* codes) {
#if HWY_TARGET == HWY_SSSE3  // no pinsrd
  const uint32_t w = LoadWord(codes);
  const auto at = [&](int k) { return t[(w >> (8 * k)) & 0xFF]; };
  return VF{_mm_setr_ps(at(0), at(1), at(2), at(3))};
#else
  const int32_t* entries = reinterpret_cast<const int32_t*>(t);
  const auto four = [entries](uint32_t w) {
    return LoadInsert4(entries, w & 0xFF, (w >> 8) & 0xFF, (w >> 16) & 0xFF, w >> 24);
  };
#if HWY_TARGET == HWY_AVX2
  return VF{_mm256_castsi256_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(four(LoadWord(codes))),
                                                        four(LoadWord(codes + 4)), 1))};
#else
  return VF{_mm_castsi128_ps(four(LoadWord(codes)))};
#endif
#endif
}
#endif

// Lanes(DF) code values for the codes at `codes`, as floats. x86: LookupLanes in the 1 KB table of values, faster
// there than gathering code pairs (figures: tools/bench/NOTES.md, '8-bit dequantize: code value lookups'). Other
// targets gather.
HWY_INLINE VF CodeValues(const PreparedCodebook& cb, const uint8_t* codes) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(df, cb.values[codes[0]]);
#elif BNB_SCALAR_LOAD_LOOKUPS
  (void)df;
  return LookupLanes(cb.values.data(), codes);
#else
  const auto index = hn::PromoteTo(DI(), hn::LoadU(DU8(), codes));
  return hn::GatherIndex(df, cb.values.data(), index);
#endif
}

// Whether StoreF32<kT, ..., kStream = true> may write the n-element output at `out`: StreamableOutput, and stores
// of whole 16-byte vectors (a narrower 16-bit store cannot stream). Streaming spares the read of each output line
// before it is overwritten (figures: tools/bench/NOTES.md, 'Streaming stores'). Callers that stream end with
// hwy::FlushStream().
template <DType kT>
HWY_INLINE bool UseStreamingStores(const void* out, int64_t n) {
  constexpr int64_t kSize = DTypeSize(kT);
  return kT != DType::kFloat16 && kSize * static_cast<int64_t>(kN) >= 16 && StreamableOutput8<kT>(out, n);
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
// NaN included), and each element is then one table entry, without a multiply or a rounding of its own. Below 512
// elements the table's 256 entries cost more than they save (figures: tools/bench/NOTES.md,
// '8-bit dequantize by output table').
inline constexpr int64_t kOutputTableFrom = 512;

// The entries a block's output table holds (DequantizeBlocksByTable): one per code, and one more that
// LookupOutputs8's assembly may read (never use) after the entry of code 255.
inline constexpr int kOutputTableSize = kCodebookSize + 1;

// outputs[codes[j]] in 16-bit lane j, j < 8, lane 0 by a plain load into the vector, the others by inserts.
// `outputs` holds kOutputTableSize entries.
HWY_INLINE __m128i LookupOutputs8(const uint8_t* codes, const uint16_t* outputs) {
#if defined(__GNUC__) || defined(__clang__)
  // In assembly for what GCC would not emit: the eight codes in one 64-bit register that has a high-byte alias
  // (constraint Q: rax, rbx, rcx or rdx), each pair split by zero-extending its low and its high byte (%ch), then a
  // shift: 11 instructions for eight codes, where GCC's shifts and masks took 16 (four codes to a 32-bit word) or
  // 24 (eight to a 64-bit one). Lane 0 comes by a 32-bit load, whose upper half (the next entry, possibly
  // outputs[256]) lane 1's insert overwrites. Figures: tools/bench/NOTES.md, '8-bit dequantize by output table'.
  __m128i v;
  uint64_t w, lo, hi;
#if HWY_TARGET == HWY_AVX2
#define BNB_INSERT(k, index) "vpinsrw $" #k ", (%[o],%[" #index "],2), %[v], %[v]\n\t"
#define BNB_LANE0 "vmovd (%[o],%[lo],2), %[v]\n\t"
#else
#define BNB_INSERT(k, index) "pinsrw $" #k ", (%[o],%[" #index "],2), %[v]\n\t"
#define BNB_LANE0 "movd (%[o],%[lo],2), %[v]\n\t"
#endif
#define BNB_SPLIT "movzbl %b[w], %k[lo]\n\tmovzbl %h[w], %k[hi]\n\t"
  asm("movq %[c], %[w]\n\t"
      BNB_SPLIT BNB_LANE0 BNB_INSERT(1, hi)
      "shrq $16, %[w]\n\t" BNB_SPLIT BNB_INSERT(2, lo) BNB_INSERT(3, hi)
      "shrq $16, %[w]\n\t" BNB_SPLIT BNB_INSERT(4, lo) BNB_INSERT(5, hi)
      "shrq $16, %[w]\n\t" BNB_SPLIT BNB_INSERT(6, lo) BNB_INSERT(7, hi)
      // hi takes movzbl from a high-byte register, which cannot be encoded with a REX prefix: a legacy register (R).
      : [v] "=&x"(v), [w] "=&Q"(w), [lo] "=&r"(lo), [hi] "=&R"(hi)
      : [c] "m"(*reinterpret_cast<const uint64_t*>(codes)), [o] "r"(outputs),
        "m"(*reinterpret_cast<const uint16_t(*)[kOutputTableSize]>(outputs)));
#undef BNB_INSERT
#undef BNB_LANE0
#undef BNB_SPLIT
  return v;
#else
  // The codes four to a 32-bit load.
  __m128i v;
  const auto quad = [&](auto index) {
    constexpr int k = decltype(index)::value;
    const uint32_t w = LoadWord(codes + 4 * k);
    if constexpr (k == 0) {
      v = _mm_cvtsi32_si128(outputs[w & 0xFF]);
    } else {
      v = _mm_insert_epi16(v, outputs[w & 0xFF], 4 * k);
    }
    v = _mm_insert_epi16(v, outputs[(w >> 8) & 0xFF], 4 * k + 1);
    v = _mm_insert_epi16(v, outputs[(w >> 16) & 0xFF], 4 * k + 2);
    v = _mm_insert_epi16(v, outputs[w >> 24], 4 * k + 3);
  };
  quad(std::integral_constant<int, 0>{});
  quad(std::integral_constant<int, 1>{});
  return v;
#endif
}

// Outputs [0, 16) from a block's table `outputs` (DequantizeBlocksByTable) for the codes at `codes`: one 16-bit
// load per output, inserted into two 8-lane vectors (pinsrw, which every one of these targets has; LookupOutputs8):
// faster than float entries by LookupLanes and a pack of the two vectors' low halves (figures:
// tools/bench/NOTES.md, '8-bit dequantize by output table'). A function, not a lambda: GCC left a lambda out of
// line on AVX2 (a call per 16 outputs).
template <bool kStream>
HWY_INLINE void StoreTableOutputs16(const uint16_t* outputs, const uint8_t* codes, uint16_t* o) {
  const __m128i a = LookupOutputs8(codes, outputs), b = LookupOutputs8(codes + 8, outputs);
  __m128i* dst = reinterpret_cast<__m128i*>(o);
  if constexpr (kStream) {
    _mm_stream_si128(dst, a);
    _mm_stream_si128(dst + 1, b);
  } else {
    _mm_storeu_si128(dst, a);
    _mm_storeu_si128(dst + 1, b);
  }
}

template <DType kT, bool kStream>
void DequantizeBlocksByTable(const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                             const Blockwise8Range& r, void* out) {
  static_assert(DTypeSize(kT) == 2, "tables hold 16-bit outputs");
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  HWY_ALIGN uint16_t outputs[kOutputTableSize] = {};
  uint16_t* o = static_cast<uint16_t*>(out);
  for (int64_t b = r.block_begin; b < r.block_end; ++b) {
    const VF scale = hn::Set(df, absmax[b]);
    for (int k = 0; k < kCodebookSize; k += static_cast<int>(N)) {
      StoreF32<kT>(hn::Mul(hn::LoadU(df, cb.values.data() + k), scale), outputs, k);
    }
    const int64_t lo = b * r.blocksize;
    const int64_t hi = std::min(lo + r.blocksize, r.n);
    int64_t i = lo;
    for (; i + 32 <= hi; i += 32) {  // two per step: half the loop overhead
      StoreTableOutputs16<kStream>(outputs, codes + i, o + i);
      StoreTableOutputs16<kStream>(outputs, codes + i + 16, o + i + 16);
    }
    for (; i + 16 <= hi; i += 16) StoreTableOutputs16<kStream>(outputs, codes + i, o + i);
    for (; i < hi; ++i) StoreElement<uint16_t>(o, i, outputs[codes[i]]);
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
      return RunStreamedIf(StreamableOutput8<kT>(out, r.n), [&](auto stream) {
        DequantizeBlocksByTable<kT, decltype(stream)::value>(codes, absmax, cb, r, out);
      });
    }
  }
#endif
  RunStreamedIf(UseStreamingStores<kT>(out, r.n), [&](auto stream) {
    DequantizeBlocks<kT, decltype(stream)::value>(codes, absmax, cb, r, out);
  });
}

void Quantize(DType dtype, const void* x, const PreparedCodebook& cb, const Blockwise8Range& r, uint8_t* codes,
              float* absmax) {
#if BNB_RUNS_AVX2_8BIT_KERNELS
  // The AVX2 kernels (blockwise8_coders-inl.h says why), except on Intel, where this target's own ran faster from
  // memory: float32 and float16 15-30% (tools/bench/NOTES.md, '8-bit quantize on Intel: AVX-512's own float32 and
  // float16'), bfloat16 by gathers 20-30% ('bfloat16 8-bit quantize by gather').
  static const bool intel = CpuIsIntel();
  if (!intel) return N_AVX2::Quantize(dtype, x, cb, r, codes, absmax);
#endif
  switch (dtype) {
    case DType::kFloat32: return QuantizeT<DType::kFloat32>(x, cb, r, codes, absmax);
    case DType::kFloat16: return QuantizeT<DType::kFloat16>(x, cb, r, codes, absmax);
    case DType::kBFloat16: return QuantizeT<DType::kBFloat16>(x, cb, r, codes, absmax);
  }
}

void Dequantize(DType dtype, const uint8_t* codes, const float* absmax, const PreparedCodebook& cb,
                const Blockwise8Range& r, void* out) {
#if BNB_RUNS_AVX2_8BIT_KERNELS
  return N_AVX2::Dequantize(dtype, codes, absmax, cb, r, out);
#endif
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
  if (dtype == DType::kFloat32
          ? blockwise8_x86::DequantizeF32(codes, absmax, cb.values.data(), r, static_cast<float*>(out))
          : blockwise8_x86::Dequantize16(dtype, codes, absmax, cb.values.data(), r, out)) {
    return;
  }
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
