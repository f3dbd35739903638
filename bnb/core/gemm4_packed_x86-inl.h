// Helpers both kernel files of the packed product share (gemm4_packed_x86.cc, gemm4_packed_amx.cc), included
// after <immintrin.h> inside namespace bnb::core::packed4_x86's anonymous namespace.

// Non-temporal prefetch this far ahead in the codes, which one call reads once, as one stream.
constexpr int64_t kAhead = 2048;

inline void PrefetchGroup(const uint8_t* run) {
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(run + kAhead + 64 * l), _MM_HINT_NTA);
}

// Each row's scale in both lanes of its pair: rows 0-7 (kHigh false) or 8-15 of a tile's 16 scales.
template <bool kHigh>
__attribute__((target("avx2,avx512f"))) inline __m512 PairScales(__m512 scales) {
  const __m512i idx = kHigh ? _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8)
                            : _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  return _mm512_permutexvar_ps(idx, scales);
}
