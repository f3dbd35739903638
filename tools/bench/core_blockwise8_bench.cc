// Single-thread speed of the core blockwise 8-bit kernels on every instruction set, without torch: the figure
// that tells kernel cost apart from threading and allocation. Prints ns per element.
// Usage: core_blockwise8_bench [elements]  (default 2^24, streamed from memory; a small count such as 16384 stays
// in cache and is repeated to the same total, which shows the cost of the arithmetic alone).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/cpu_isa.h"

namespace {

// Best of five timings of `reps` calls of fn over n elements, in ns per element.
template <class Fn>
double BestNs(const Fn& fn, int64_t n, int64_t reps) {
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < reps; ++k) fn();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(n * reps));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bnb::core;
  constexpr int64_t kTotal = int64_t{1} << 24, bs = 4096;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : kTotal;
  if (n < 1) {
    std::fprintf(stderr, "core_blockwise8_bench: elements must be a positive count, got \"%s\"\n", argv[1]);
    return 2;
  }
  const int64_t reps = std::max<int64_t>(1, kTotal / n);
  std::vector<float> x(n);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> xb(n);
  for (int64_t i = 0; i < n; ++i) xb[i] = FloatToBF16(x[i]);
  auto map = CreateDynamicMap();
  auto cb = PrepareCodebook(map->data(), 256);
  std::vector<uint8_t> codes(n);
  std::vector<float> absmax(NumBlocks(n, bs)), out(n);
  const Blockwise8Range r{n, bs, 0, NumBlocks(n, bs)};
  std::printf("%-8s %14s %14s %14s %14s\n", "isa", "quant f32", "quant bf16", "dequant f32", "dequant bf16");
  for (const std::string& isa : AvailableIsas()) {
    if (!SetIsaCap(isa).ok()) return 1;
    const double q32 = BestNs([&] { QuantizeBlockwise8(DType::kFloat32, x.data(), *cb, r, codes.data(), absmax.data()); }, n, reps);
    const double q16 = BestNs([&] { QuantizeBlockwise8(DType::kBFloat16, xb.data(), *cb, r, codes.data(), absmax.data()); }, n, reps);
    const double d32 = BestNs([&] { DequantizeBlockwise8(DType::kFloat32, codes.data(), absmax.data(), *cb, r, out.data()); }, n, reps);
    const double d16 = BestNs([&] { DequantizeBlockwise8(DType::kBFloat16, codes.data(), absmax.data(), *cb, r, xb.data()); }, n, reps);
    std::printf("%-8s %11.2f ns %11.2f ns %11.2f ns %11.2f ns\n", isa.c_str(), q32, q16, d32, d16);
  }
  return 0;
}
