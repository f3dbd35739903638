// Shared by the single-thread core benchmarks (core_blockwise8_bench, core_blockwise4_bench): the lengths the
// quantize / dequantize figures are taken at, timing, and the input data.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "bnb/core/dtype.h"

namespace bnb::bench {

// 2^24 elements stream through memory (64 MiB of float32); 2^16 stay in L2 and are repeated to the same total,
// which shows the cost of a kernel's arithmetic alone.
inline constexpr int64_t kStreamedLength = int64_t{1} << 24;
inline constexpr int64_t kCachedLength = int64_t{1} << 16;

// The best of `rounds` wall times of fn(), in nanoseconds.
template <class Fn>
double BestNs(const Fn& fn, int rounds = 5) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// n standard normal values, as float32 and as the same values rounded to bfloat16 bits.
struct NormalInput {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};

inline NormalInput MakeNormalInput(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  NormalInput in{std::vector<float>(n), std::vector<uint16_t>(n)};
  for (int64_t i = 0; i < n; ++i) {
    in.f32[i] = normal(rng);
    in.bf16[i] = core::FloatToBF16(in.f32[i]);
  }
  return in;
}

}  // namespace bnb::bench
