// Shared by the single-thread core benchmarks (core_blockwise8_bench, core_blockwise4_bench): the lengths the
// quantize / dequantize figures are taken at, timing, and the input data.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/dtype.h"

namespace bnb::bench {

// 2^24 elements stream through memory (64 MiB of float32); 2^16 stay in L2 and are repeated to the same total,
// which shows the cost of a kernel's arithmetic alone.
inline constexpr int64_t kStreamedLength = int64_t{1} << 24;
inline constexpr int64_t kCachedLength = int64_t{1} << 16;

// The command line of a core benchmark: the instruction sets to time (default: every one available), and
// `--rounds N`, the best of how many timed rounds each figure is (default 5; more for A/B runs on a noisy machine).
struct Args {
  std::vector<std::string> isas;
  int rounds = 5;

  bool Wants(const std::string& isa) const {
    return isas.empty() || std::find(isas.begin(), isas.end(), isa) != isas.end();
  }
};

// Args from argv; nullopt, after printing what is wrong to stderr, for an unknown instruction set or a bad --rounds.
inline std::optional<Args> ParseArgs(int argc, char** argv) {
  Args args;
  const std::vector<std::string> available = core::AvailableIsas();
  for (int k = 1; k < argc; ++k) {
    const std::string arg = argv[k];
    if (arg == "--rounds") {
      args.rounds = k + 1 < argc ? std::atoi(argv[++k]) : 0;
      if (args.rounds < 1) {
        std::fprintf(stderr, "--rounds takes a positive count\n");
        return std::nullopt;
      }
    } else if (std::find(available.begin(), available.end(), arg) != available.end()) {
      args.isas.push_back(arg);
    } else {
      std::string names;
      for (const std::string& isa : available) names += " " + isa;
      std::fprintf(stderr, "unknown argument '%s': expected --rounds N or an instruction set of this CPU:%s\n",
                   arg.c_str(), names.c_str());
      return std::nullopt;
    }
  }
  return args;
}

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
  std::vector<uint16_t> f16;
};

inline NormalInput MakeNormalInput(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  NormalInput in{std::vector<float>(n), std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
  for (int64_t i = 0; i < n; ++i) {
    in.f32[i] = normal(rng);
    in.bf16[i] = core::FloatToBF16(in.f32[i]);
    in.f16[i] = core::FloatToHalf(in.f32[i]);
  }
  return in;
}

}  // namespace bnb::bench
