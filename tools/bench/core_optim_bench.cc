// Single-thread cost of the 8-bit blockwise optimizer step (core::OptimizerUpdate8, AdamW, float32 parameter) and
// of its three stages on their own (the two states' dequantize, the 32-bit update, the two states' quantize, at the
// optimizer's blocksize of 256), on every instruction set, without torch. Prints ns per parameter, streamed from
// memory and in cache. Arguments: see bnb::bench::ParseArgs (e.g. `avx2 --rounds 15`).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/optim.h"
#include "tools/bench/core_bench.h"

int main(int argc, char** argv) {
  using namespace bnb::core;
  const std::optional<bnb::bench::Args> args = bnb::bench::ParseArgs(argc, argv);
  if (!args) return 2;
  using bnb::bench::BestNs;
  const int64_t n = bnb::bench::kStreamedLength, bs = kOptimizerBlocksize;
  std::mt19937 rng(0);
  const bnb::bench::NormalInput g = bnb::bench::MakeNormalInput(n, rng);
  std::vector<float> p = bnb::bench::MakeNormalInput(n, rng).f32;
  auto signed_map = CreateDynamicMap(true), unsigned_map = CreateDynamicMap(false);
  auto cb1 = PrepareCodebook(signed_map->data(), 256), cb2 = PrepareCodebook(unsigned_map->data(), 256);
  if (!cb1.ok() || !cb2.ok()) return 1;
  // States as a few steps of Adam leave them: m ~ g / 10, v ~ g^2 / 1000, coded in blocks.
  std::vector<float> m(n), v(n), absmax1(NumBlocks(n, bs)), absmax2(NumBlocks(n, bs));
  for (int64_t i = 0; i < n; ++i) m[i] = g.f32[i] * 0.1f, v[i] = g.f32[i] * g.f32[i] * 1e-3f;
  std::vector<uint8_t> q1(n), q2(n);
  const Blockwise8Range all{n, bs, 0, NumBlocks(n, bs)};
  QuantizeBlockwise8(DType::kFloat32, m.data(), *cb1, all, q1.data(), absmax1.data());
  QuantizeBlockwise8(DType::kFloat32, v.data(), *cb2, all, q2.data(), absmax2.data());
  OptimStep st = MakeOptimStep(OptimRule::kAdam, true, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, 10, 1e-3, 1.0, false);
  for (const int64_t len : {bnb::bench::kStreamedLength, bnb::bench::kCachedLength}) {
    const int64_t reps = n / len;
    std::printf("ns per parameter, AdamW, float32 p, %lld elements%s, blocksize %lld\n", static_cast<long long>(len),
                reps > 1 ? " (in cache)" : "", static_cast<long long>(bs));
    std::printf("%-8s %14s %14s %14s %14s\n", "isa", "8-bit step", "dequant x2", "update32", "quant x2");
    const Blockwise8Range r{len, bs, 0, NumBlocks(len, bs)};
    const auto per_param = [&](const auto& fn) {
      return BestNs([&] { for (int64_t k = 0; k < reps; ++k) fn(); }, args->rounds) / static_cast<double>(n);
    };
    for (const std::string& isa : AvailableIsas()) {
      if (!args->Wants(isa)) continue;
      if (!SetIsaCap(isa).ok()) return 1;
      const double step = per_param([&] {
        OptimizerUpdate8(st, DType::kFloat32, g.f32.data(), p.data(), q1.data(), nullptr, q2.data(), *cb1, &*cb2,
                         absmax1.data(), nullptr, absmax2.data(), len, 0, r.block_end);
      });
      const double deq = per_param([&] {
        DequantizeBlockwise8(DType::kFloat32, q1.data(), absmax1.data(), *cb1, r, m.data());
        DequantizeBlockwise8(DType::kFloat32, q2.data(), absmax2.data(), *cb2, r, v.data());
      });
      const double upd = per_param([&] {
        OptimizerUpdate32(st, DType::kFloat32, g.f32.data(), p.data(), m.data(), nullptr, v.data(), 0, len);
      });
      const double quant = per_param([&] {
        QuantizeBlockwise8(DType::kFloat32, m.data(), *cb1, r, q1.data(), absmax1.data());
        QuantizeBlockwise8(DType::kFloat32, v.data(), *cb2, r, q2.data(), absmax2.data());
      });
      std::printf("%-8s %11.3f ns %11.3f ns %11.3f ns %11.3f ns\n", isa.c_str(), step, deq, upd, quant);
    }
    if (!SetIsaCap("best").ok()) return 1;
  }
  return 0;
}
