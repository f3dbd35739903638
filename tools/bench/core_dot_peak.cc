// The ceiling of the CPU's dot-product instructions, one thread: how many vpdpbusd (AVX512-VNNI, int8: 64
// multiply-adds) and vdpbf16ps (AVX512-BF16: 32) a core issues per nanosecond with enough independent accumulators,
// without loads and with a zmm load per instruction. The int8 product and the bfloat16 gemm_4bit kernels are judged
// against it (tools/bench/NOTES.md, 'int8 product', 'Small batches: dequantized bfloat16 tables'): an issue's speed
// goal above it is not reachable by any kernel on that CPU. Prints "not available" for an extension the CPU lacks.
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kAcc = 12;  // independent accumulators: more than latency x issue rate
constexpr int64_t kIters = int64_t{1} << 24;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One timed run of kIters x kAcc instructions; `loaded`: each takes a zmm load as its second operand.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double VnniSeconds(bool loaded, const int8_t* mem,
                                                                           float* sink) {
  __m512i acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_si512();
  __m512i a = _mm512_set1_epi8(1);
  const __m512i b = _mm512_set1_epi8(2);
  const auto t0 = std::chrono::steady_clock::now();
  if (loaded) {
    for (int64_t i = 0; i < kIters; ++i) {
      const int8_t* p = mem + (i & 31) * 64;
#pragma GCC unroll 12
      for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, _mm512_loadu_si512(p + k * 2048));
    }
  } else {
    for (int64_t i = 0; i < kIters; ++i) {
#pragma GCC unroll 12
      for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
      __asm__ volatile("" : "+v"(a));
    }
  }
  const double seconds = Seconds(t0);
  __m512i s = acc[0];
  for (int k = 1; k < kAcc; ++k) s = _mm512_add_epi32(s, acc[k]);
  *sink += static_cast<float>(_mm512_reduce_add_epi32(s));
  return seconds;
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) double Bf16Seconds(bool loaded, const uint16_t* mem,
                                                                          float* sink) {
  __m512 acc[kAcc];
  for (auto& x : acc) x = _mm512_setzero_ps();
  __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));
  const __m512bh b = a;
  const auto t0 = std::chrono::steady_clock::now();
  if (loaded) {
    for (int64_t i = 0; i < kIters; ++i) {
      const uint16_t* p = mem + (i & 31) * 32;
#pragma GCC unroll 12
      for (int k = 0; k < kAcc; ++k) {
        acc[k] = _mm512_dpbf16_ps(acc[k], a, reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + k * 1024)));
      }
    }
  } else {
    for (int64_t i = 0; i < kIters; ++i) {
#pragma GCC unroll 12
      for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
      __asm__ volatile("" : "+v"(a));
    }
  }
  const double seconds = Seconds(t0);
  __m512 s = acc[0];
  for (int k = 1; k < kAcc; ++k) s = _mm512_add_ps(s, acc[k]);
  *sink += _mm512_reduce_add_ps(s);
  return seconds;
}

// Instructions per nanosecond, the best of five runs.
template <class Run>
double BestPerNs(const Run& run) {
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const double rate = static_cast<double>(kIters * kAcc) / run() / 1e9;
    best = rate > best ? rate : best;
  }
  return best;
}

}  // namespace

int main() {
  float sink = 0;
  // Loads rotate over 32 offsets of 12 rows 2 KB apart (48 KB: in L1 and L2, not in one L1 set).
  std::vector<int8_t> bytes(32 * 64 + 12 * 2048, 1);
  std::vector<uint16_t> halves(32 * 32 + 12 * 1024, 0x3F80);
  std::printf("one thread, %d independent accumulators\n", kAcc);
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) {
    const double plain = BestPerNs([&] { return VnniSeconds(false, bytes.data(), &sink); });
    const double loaded = BestPerNs([&] { return VnniSeconds(true, bytes.data(), &sink); });
    std::printf("vpdpbusd zmm: %.2f per ns (%.3f TOP/s), with a load each %.2f per ns (%.3f TOP/s)\n", plain,
                plain * 128e-3, loaded, loaded * 128e-3);
  } else {
    std::printf("vpdpbusd zmm: not available (no AVX512-VNNI)\n");
  }
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw")) {
    const double plain = BestPerNs([&] { return Bf16Seconds(false, halves.data(), &sink); });
    const double loaded = BestPerNs([&] { return Bf16Seconds(true, halves.data(), &sink); });
    std::printf("vdpbf16ps zmm: %.2f per ns (%.1f GFLOP/s), with a load each %.2f per ns (%.1f GFLOP/s)\n", plain,
                plain * 64, loaded, loaded * 64);
  } else {
    std::printf("vdpbf16ps zmm: not available (no AVX512-BF16)\n");
  }
  return sink == 12345.0f ? 1 : 0;  // keeps the sums alive
}
