// Single-thread speed of the core blockwise 8-bit kernels on every instruction set, without torch: the figure
// that tells kernel cost apart from threading and allocation. Prints ns per element, streamed from memory and in
// cache. Arguments: see bnb::bench::ParseArgs (e.g. `avx2 --rounds 15`).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/cpu_isa.h"
#include "tools/bench/core_bench.h"

int main(int argc, char** argv) {
  using namespace bnb::core;
  const std::optional<bnb::bench::Args> args = bnb::bench::ParseArgs(argc, argv);
  if (!args) return 2;
  using bnb::bench::BestNs;
  const int64_t n = bnb::bench::kStreamedLength;
  std::mt19937 rng(0);
  const bnb::bench::NormalInput in = bnb::bench::MakeNormalInput(n, rng);
  auto map = CreateDynamicMap();
  auto cb = PrepareCodebook(map->data(), 256);
  std::vector<uint8_t> codes(n);
  std::vector<float> absmax(NumBlocks(n, 64)), out(n);
  std::vector<uint16_t> out_bf16(n);  // not in.bf16: later targets must quantize the same input
  for (const int64_t len : {bnb::bench::kStreamedLength, bnb::bench::kCachedLength}) {
    const int64_t reps = n / len;
    std::printf("ns per element, %lld elements%s\n", static_cast<long long>(len), reps > 1 ? " (in cache)" : "");
    std::printf("%-8s %5s %14s %14s %14s %14s %14s\n", "isa", "bs", "quant f32", "quant bf16", "quant f16",
                "dequant f32", "dequant bf16");
    const auto per_elem = [&](const auto& fn) {
      return BestNs([&] { for (int64_t k = 0; k < reps; ++k) fn(); }, args->rounds) / static_cast<double>(n);
    };
    for (const std::string& isa : AvailableIsas()) {
      if (!args->Wants(isa)) continue;
      if (!SetIsaCap(isa).ok()) return 1;
      // 256: the optimizers' blocks and nested statistics; 4096: quantize_blockwise's default.
      for (const int64_t bs : {64, 256, 4096}) {
        const Blockwise8Range r{len, bs, 0, NumBlocks(len, bs)};
        const double q32 = per_elem([&] { QuantizeBlockwise8(DType::kFloat32, in.f32.data(), *cb, r, codes.data(), absmax.data()); });
        const double q16 = per_elem([&] { QuantizeBlockwise8(DType::kBFloat16, in.bf16.data(), *cb, r, codes.data(), absmax.data()); });
        const double q16h = per_elem([&] { QuantizeBlockwise8(DType::kFloat16, in.f16.data(), *cb, r, codes.data(), absmax.data()); });
        const double d32 = per_elem([&] { DequantizeBlockwise8(DType::kFloat32, codes.data(), absmax.data(), *cb, r, out.data()); });
        const double d16 = per_elem([&] { DequantizeBlockwise8(DType::kBFloat16, codes.data(), absmax.data(), *cb, r, out_bf16.data()); });
        std::printf("%-8s %5lld %11.3f ns %11.3f ns %11.3f ns %11.3f ns %11.3f ns\n", isa.c_str(),
                    static_cast<long long>(bs), q32, q16, q16h, d32, d16);
      }
    }
    if (!SetIsaCap("best").ok()) return 1;
  }
  return 0;
}
