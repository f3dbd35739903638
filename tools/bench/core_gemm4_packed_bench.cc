// The packed 4-bit layout (gemm4_packed.h) against the row-major kernels (gemv4.h) on the same weights, its AMX
// kernel beside its AVX-512 one (where the CPU has AMX-BF16), and the int8-activation product over it (its
// activations quantized in each call), 1 and 2 threads, bfloat16 and float32 A, one row and batches; weights cycled
// over copies larger than the last-level cache, so each call reads its weight from memory, and a copy of as many
// bytes as the limit.
// Usage: core_gemm4_packed_bench [--rounds N] [--batches M1,M2,...]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/cpu_isa.h"
#include "tools/bench/core_bench.h"
#include "bnb/core/dtype.h"
#include "bnb/core/gemm4_packed.h"
#include "bnb/core/gemv4.h"

namespace {

using bnb::core::DType;

constexpr int64_t kBlocksize = 64;
constexpr int64_t kCopyBytes = int64_t{96} << 20;  // the weights cycled through: above any L3 here

// fn(part, parts) on `threads` threads.
void Parallel(int threads, const std::function<void(int, int)>& fn) {
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(fn, i, threads);
  fn(0, threads);
  for (auto& th : pool) th.join();
}

template <class Fn>
double BestUs(int rounds, const Fn& fn) {
  return bnb::bench::BestNs(fn, rounds) / 1000.0;
}

struct Weight {
  std::vector<uint8_t> B, codes;
  std::vector<float> absmax, scales;
};

void Run(int64_t N, int64_t K, int64_t M, DType dtype, int threads, int rounds) {
  std::mt19937 rng(7);
  const int64_t bytes = N * K / 2;
  const int copies = static_cast<int>(std::max<int64_t>(2, kCopyBytes / bytes));
  std::vector<Weight> ws(copies);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  for (auto& w : ws) {
    w.B.resize(bytes);
    for (auto& b : w.B) b = static_cast<uint8_t>(byte(rng));
    w.absmax.resize(N * K / kBlocksize);
    for (auto& s : w.absmax) s = scale(rng);
    w.codes.resize(bnb::core::Packed4CodeBytes(N, K));
    w.scales.resize(bnb::core::Packed4ScaleCount(N, K, kBlocksize));
    bnb::core::Pack4(w.B.data(), w.absmax.data(), N, K, kBlocksize, w.codes.data(), w.scales.data(), 0,
                     bnb::core::Packed4Tiles(N));
  }
  const float* code16 = bnb::core::Code4(bnb::core::Quant4::kNF4).data();
  std::vector<uint16_t> a16(M * K);
  std::vector<float> a32(M * K);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < M * K; ++i) a32[i] = normal(rng), a16[i] = bnb::core::FloatToBF16(a32[i]);
  const void* A = dtype == DType::kBFloat16 ? static_cast<const void*>(a16.data()) : a32.data();
  std::vector<float> out(M * N * 2);
  int next = 0;
  const auto row_major = [&] {
    const Weight& w = ws[next++ % copies];
    Parallel(threads, [&](int part, int parts) {
      const int64_t r0 = N * part / parts, r1 = N * (part + 1) / parts;
      if (M == 1) {
        bnb::core::Gemv4(dtype, A, w.B.data(), w.absmax.data(), code16, N, K, kBlocksize, out.data(), r0, r1);
      } else {
        bnb::core::Gemm4Small(dtype, A, M, w.B.data(), w.absmax.data(), nullptr, code16, N, K, kBlocksize, nullptr,
                              out.data(), r0, r1);
      }
    });
  };
  const auto packed = [&] {
    const Weight& w = ws[next++ % copies];
    const bnb::core::Packed4 p{w.codes.data(), w.scales.data(), N, K, kBlocksize};
    const int64_t tiles = bnb::core::Packed4Tiles(N);
    Parallel(threads, [&](int part, int parts) {
      bnb::core::Gemm4Packed(dtype, A, M, p, code16, nullptr, out.data(), tiles * part / parts,
                             tiles * (part + 1) / parts);
    });
  };
  // The AMX kernel where the CPU has it (cpu.amx), beside the AVX-512 one above.
  const auto amx = [&] {
    bnb::core::SetAmxAllowed(true);
    packed();
    bnb::core::SetAmxAllowed(false);
  };
  int8_t values16[16];
  int bad = 0;
  bnb::core::Int8CodeValues(code16, values16, &bad);
  const auto int8 = [&] {  // the activations quantized once per call, as the op does
    const Weight& w = ws[next++ % copies];
    const bnb::core::Packed4 p{w.codes.data(), w.scales.data(), N, K, kBlocksize};
    const int64_t tiles = bnb::core::Packed4Tiles(N);
    const bnb::core::Int8Activations act = bnb::core::QuantizeActivationsInt8(dtype, A, M, K);
    Parallel(threads, [&](int part, int parts) {
      bnb::core::Gemm4PackedInt8(dtype, act, p, values16, nullptr, out.data(), tiles * part / parts,
                                 tiles * (part + 1) / parts);
    });
  };
  std::vector<uint8_t> dst(bytes);
  const auto copy = [&] {
    const Weight& w = ws[next++ % copies];
    Parallel(threads, [&](int part, int parts) {
      const int64_t b0 = bytes * part / parts, b1 = bytes * (part + 1) / parts;
      std::memcpy(dst.data() + b0, w.B.data() + b0, b1 - b0);
    });
  };
  const bool small_ok = M == 1 || bnb::core::Gemm4SmallRuns(dtype, M, K);
  bnb::core::SetAmxAllowed(true);
  const bool amx_ok = std::string(bnb::core::Gemm4PackedKernelName(dtype, M)) == "amx";
  bnb::core::SetAmxAllowed(false);
  const bool packed_ok = bnb::core::Gemm4PackedRuns(dtype, M), int8_ok = bnb::core::Gemm4PackedInt8Runs();
  double best_row = 1e30, best_packed = 1e30, best_amx = 1e30, best_int8 = 1e30, best_copy = 1e30;
  for (int r = 0; r < rounds; ++r) {  // alternating, so all see the same machine
    if (small_ok) best_row = std::min(best_row, BestUs(1, row_major));
    if (packed_ok) best_packed = std::min(best_packed, BestUs(1, packed));
    if (amx_ok) best_amx = std::min(best_amx, BestUs(1, amx));
    if (int8_ok) best_int8 = std::min(best_int8, BestUs(1, int8));
    best_copy = std::min(best_copy, BestUs(1, copy));
  }
  const auto shown = [](bool ok, double us) { return ok ? us : 0.0; };
  std::printf("%5lld x %5lld  M %3lld  %-8s %d thr: row-major %8.1f us   packed %8.1f us  (%.2fx)   AMX %8.1f us"
              "   int8 A %8.1f us   copy %7.1f us  packed %3.0f%% of copy\n",
              static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(M),
              dtype == DType::kBFloat16 ? "bfloat16" : "float32", threads, shown(small_ok, best_row),
              shown(packed_ok, best_packed), small_ok && packed_ok ? best_row / best_packed : 0.0,
              shown(amx_ok, best_amx),
              shown(int8_ok, best_int8), best_copy, packed_ok ? 100.0 * best_copy / best_packed : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  std::vector<int64_t> batches;  // --batches 16,64: those bfloat16 batches alone (A/B runs of the batch kernel)
  for (int k = 1; k + 1 < argc; ++k) {
    if (std::string(argv[k]) == "--rounds") rounds = std::max(1, std::atoi(argv[k + 1]));
    if (std::string(argv[k]) == "--batches") {
      for (const char* p = argv[k + 1]; *p != 0;) {
        char* end = nullptr;
        batches.push_back(std::strtoll(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
  if (!batches.empty()) {
    for (int threads : {1, 2}) {
      for (int64_t M : batches) Run(4096, 4096, M, DType::kBFloat16, threads, rounds);
    }
    return 0;
  }
  // Packing cost: one 4096 x 4096 weight, one thread.
  {
    const int64_t N = 4096, K = 4096;
    std::vector<uint8_t> B(N * K / 2, 0x5A), codes(bnb::core::Packed4CodeBytes(N, K));
    std::vector<float> absmax(N * K / kBlocksize, 1.0f), scales(bnb::core::Packed4ScaleCount(N, K, kBlocksize));
    const double us = BestUs(5, [&] {
      bnb::core::Pack4(B.data(), absmax.data(), N, K, kBlocksize, codes.data(), scales.data(), 0,
                       bnb::core::Packed4Tiles(N));
    });
    std::printf("Pack4 4096 x 4096 bs64: %.0f us (%.2f s per GB of codes)\n", us, us * 1e-6 / (N * K / 2 * 1e-9));
    // Dequantizing the weight to bfloat16 from the tiled layout (the dense path of large bfloat16 batches) against
    // from bitsandbytes' bytes, in bands of 512 rows (as gemm_4bit_packed's), in cache, one thread.
    std::vector<uint16_t> band(512 * K);
    const float* code16 = bnb::core::Code4(bnb::core::Quant4::kNF4).data();
    const bnb::core::Packed4 w{codes.data(), scales.data(), N, K, kBlocksize};
    const double tiled = BestUs(5, [&] {
      for (int64_t t = 0; t < bnb::core::Packed4Tiles(N); t += 32)
        bnb::core::DequantizePacked4(DType::kBFloat16, w, code16, band.data(), t, t + 32);
    });
    const double plain = BestUs(5, [&] {
      for (int64_t n0 = 0; n0 < N; n0 += 512) {
        const bnb::core::Blockwise4Range rows{512 * K, kBlocksize, 0, 512 * K / kBlocksize};
        bnb::core::DequantizeBlockwise4(DType::kBFloat16, B.data() + n0 * K / 2, absmax.data() + n0 * K / kBlocksize,
                                        code16, rows, band.data());
      }
    });
    std::printf("dequantize 4096 x 4096 to bfloat16 in bands: from the tiled layout %.0f us, from bitsandbytes' "
                "%.0f us\n", tiled, plain);
  }
  for (int threads : {1, 2}) {
    for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
      Run(4096, 4096, 1, dtype, threads, rounds);
      Run(14336, 4096, 1, dtype, threads, rounds);
      Run(4096, 14336, 1, dtype, threads, rounds);
    }
    for (int64_t M : {2, 4, 8, 16, 32, 64, 128}) Run(4096, 4096, M, DType::kBFloat16, threads, rounds);
  }
  return 0;
}
