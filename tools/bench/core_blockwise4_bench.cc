// Single-thread speed of the core 4-bit kernels on every instruction set, without torch: quantize / dequantize in
// ns per element, and gemv (one token times an N x K 4-bit weight) in microseconds per call. Arguments: see
// bnb::bench::ParseArgs (e.g. `avx2 --rounds 15`).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/gemv4.h"
#include "tools/bench/core_bench.h"

int main(int argc, char** argv) {
  using namespace bnb::core;
  const std::optional<bnb::bench::Args> args = bnb::bench::ParseArgs(argc, argv);
  if (!args) return 2;
  using bnb::bench::BestNs;
  const int64_t n = bnb::bench::kStreamedLength;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  const bnb::bench::NormalInput in = bnb::bench::MakeNormalInput(n, rng);
  const std::vector<float>& x = in.f32;
  const std::vector<uint16_t>& xb = in.bf16;
  const std::vector<uint16_t>& xh = in.f16;
  std::vector<uint8_t> packed(PackedSize4(n));
  std::vector<float> absmax(NumBlocks(n, 32)), out(n);
  std::vector<uint16_t> out_bf16(n);  // not xb: later targets must quantize the same input
  const float* nf4 = Code4(Quant4::kNF4).data();

  for (const int64_t len : {bnb::bench::kStreamedLength, bnb::bench::kCachedLength}) {
    const int reps = static_cast<int>(n / len);
    std::printf("quantize / dequantize, ns per element, %lld elements%s\n", static_cast<long long>(len),
                reps > 1 ? " (in cache)" : "");
    std::printf("%-8s %5s %11s %11s %11s %11s %11s %11s\n", "isa", "bs", "quant f32", "quant bf16", "quant f16",
                "quant fp4", "deq f32", "deq bf16");
    for (const std::string& isa : AvailableIsas()) {
      if (!args->Wants(isa)) continue;
      if (!SetIsaCap(isa).ok()) return 1;
      for (int64_t bs : {64, 512, 4096}) {
        const Blockwise4Range r{len, bs, 0, NumBlocks(len, bs)};
        const auto per_elem = [&](const auto& fn) {
          return BestNs([&] { for (int k = 0; k < reps; ++k) fn(); }, args->rounds) / n;
        };
        const double q32 = per_elem([&] { QuantizeBlockwise4(DType::kFloat32, x.data(), Quant4::kNF4, r, packed.data(), absmax.data()); });
        const double q16 = per_elem([&] { QuantizeBlockwise4(DType::kBFloat16, xb.data(), Quant4::kNF4, r, packed.data(), absmax.data()); });
        const double qh = per_elem([&] { QuantizeBlockwise4(DType::kFloat16, xh.data(), Quant4::kNF4, r, packed.data(), absmax.data()); });
        const double qfp4 = per_elem([&] { QuantizeBlockwise4(DType::kFloat32, x.data(), Quant4::kFP4, r, packed.data(), absmax.data()); });
        QuantizeBlockwise4(DType::kFloat32, x.data(), Quant4::kNF4, r, packed.data(), absmax.data());
        const double d32 = per_elem([&] { DequantizeBlockwise4(DType::kFloat32, packed.data(), absmax.data(), nf4, r, out.data()); });
        const double d16 = per_elem([&] { DequantizeBlockwise4(DType::kBFloat16, packed.data(), absmax.data(), nf4, r, out_bf16.data()); });
        std::printf("%-8s %5lld %8.3f ns %8.3f ns %8.3f ns %8.3f ns %8.3f ns %8.3f ns\n", isa.c_str(),
                    static_cast<long long>(bs), q32, q16, qh, qfp4, d32, d16);
      }
    }
  }
  if (!SetIsaCap("best").ok()) return 1;
  {
    const Blockwise4Range r{n, 64, 0, NumBlocks(n, 64)};
    const double q32 = BestNs([&] { QuantizeBlockwise4Scalar(DType::kFloat32, x.data(), Quant4::kNF4, r, packed.data(), absmax.data()); }, 2) / n;
    const double d32 = BestNs([&] { DequantizeBlockwise4Scalar(DType::kFloat32, packed.data(), absmax.data(), nf4, r, out.data()); }, 2) / n;
    std::printf("%-8s %5d %8.3f ns %11s %11s %11s %8.3f ns\n", "ref", 64, q32, "", "", "", d32);
  }

  std::printf("\ngemv: 1 x K times (N x K NF4, blocksize 64), microseconds per call, one thread\n");
  std::printf("%-8s %14s %9s %9s %12s\n", "isa", "N x K", "f32", "bf16", "weight GB/s");
  struct Shape {
    int64_t n, k;
  };
  for (const Shape& s : {Shape{256, 4096}, Shape{4096, 4096}, Shape{11008, 4096}, Shape{4096, 11008}}) {
    const int64_t total = s.n * s.k, bs = 64;
    std::vector<float> w(total);
    for (auto& v : w) v = normal(rng);
    std::vector<uint8_t> wq(PackedSize4(total));
    std::vector<float> wabs(NumBlocks(total, bs));
    QuantizeBlockwise4(DType::kFloat32, w.data(), Quant4::kNF4, {total, bs, 0, NumBlocks(total, bs)}, wq.data(),
                       wabs.data());
    std::vector<float> a(s.k), y(s.n);
    std::vector<uint16_t> ab(s.k), yb(s.n);
    for (int64_t k = 0; k < s.k; ++k) {
      a[k] = normal(rng);
      ab[k] = FloatToBF16(a[k]);
    }
    const double bytes = static_cast<double>(wq.size() + wabs.size() * 4);
    for (const std::string& isa : AvailableIsas()) {
      if (!args->Wants(isa)) continue;
      if (!SetIsaCap(isa).ok()) return 1;
      const double t32 = BestNs([&] { Gemv4(DType::kFloat32, a.data(), wq.data(), wabs.data(), nf4, s.n, s.k, bs, y.data(), 0, s.n); }, args->rounds);
      const double t16 = BestNs([&] { Gemv4(DType::kBFloat16, ab.data(), wq.data(), wabs.data(), nf4, s.n, s.k, bs, yb.data(), 0, s.n); }, args->rounds);
      std::printf("%-8s %6lld x %5lld %9.0f %9.0f %12.2f\n", isa.c_str(), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), t32 / 1e3, t16 / 1e3, bytes / t32);
    }
    if (!SetIsaCap("best").ok()) return 1;
    // Baseline: the same product with a dense float32 weight (what F.linear reads), plain loop.
    const double tdense = BestNs([&] {
      for (int64_t m = 0; m < s.n; ++m) {
        float acc = 0;
        const float* row = w.data() + m * s.k;
        for (int64_t k = 0; k < s.k; ++k) acc += row[k] * a[k];
        y[m] = acc;
      }
    }, 2);
    std::printf("%-8s %6lld x %5lld %9.0f %9s %12.2f  (dense fp32 weight, scalar loop)\n", "dense", static_cast<long long>(s.n),
                static_cast<long long>(s.k), tdense / 1e3, "", total * 4.0 / tdense);
  }
  return 0;
}
