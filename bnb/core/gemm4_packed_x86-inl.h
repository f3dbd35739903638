// Helpers the kernel files of the packed product share (gemm4_packed_x86.cc, gemm4_packed_amx.cc,
// gemm4_blocked_x86.cc), included after <immintrin.h> inside namespace bnb::core::packed4_x86's anonymous namespace.

// How far ahead in the codes (one stream a tile) the AMX kernel's decode prefetches: a chunk of groups.
constexpr int64_t kAhead = 2048;

// The AVX-512 kernels' prefetch of a group's codes, 8 groups ahead, into L2: on Sapphire/Emerald Rapids one core
// reads memory near its limit only with this many lines requested ahead (NTA 4 groups ahead, into L1, ran one
// token 1.4x slower there); on Zen 4 the hardware prefetchers carry the stream either way (tools/bench/NOTES.md).
constexpr int64_t kGroupAhead = 4096;

inline void PrefetchGroup(const uint8_t* run) {
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(run + kGroupAhead + 64 * l), _MM_HINT_T1);
}

// Each row's scale in both lanes of its pair: rows 0-7 (kHigh false) or 8-15 of a tile's 16 scales.
template <bool kHigh>
__attribute__((target("avx2,avx512f"))) inline __m512 PairScales(__m512 scales) {
  const __m512i idx = kHigh ? _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8)
                            : _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  return _mm512_permutexvar_ps(idx, scales);
}

// 16 values of A (`dtype`) from element i, as float32.
__attribute__((target("avx2,avx512f,avx512bw"))) inline __m512 Load16AsF32(DType dtype, const void* A, int64_t i) {
  const auto* a16 = reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(A) + i);
  switch (dtype) {
    case DType::kFloat32: return _mm512_loadu_ps(static_cast<const float*>(A) + i);
    case DType::kBFloat16:
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(a16)), 16));
    case DType::kFloat16: return _mm512_cvtph_ps(_mm256_loadu_si256(a16));
  }
  return _mm512_setzero_ps();
}
