// Every float32 in [-1, 1], both signs, through every 8-bit quantize coder (coder_probe.h) on every instruction set
// this CPU has, for the dynamic maps and a linear one, each lane checked against NearestCode. About 2.1e9 values per
// coder; a minute or two on two cores.
// Usage: coders_exhaustive [--step K] [--threads T] [--isa NAME]
//   --step K: every K-th float only (a quick run); --isa: that instruction set alone.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bnb/core/codebook.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/core/dtype.h"
#include "tools/fuzz/coder_probe.h"

namespace {

using bnb::core::PreparedCodebook;
using bnb::fuzz::Coder;

// NearestCode of v[0, n) by walking the sorted midpoints from the previous value's position: O(1) a value when the
// values are consecutive floats.
void ReferenceCodes(const PreparedCodebook& cb, const float* v, int64_t n, uint8_t* out) {
  int pos = bnb::core::SortedPosition(cb, v[0]);
  for (int64_t i = 0; i < n; ++i) {
    while (pos < bnb::core::kCodebookSize - 1 && v[i] > cb.midpoints[pos]) ++pos;
    while (pos > 0 && !(v[i] > cb.midpoints[pos - 1])) --pos;
    out[i] = static_cast<uint8_t>(cb.sorted_to_code[pos]);
  }
}

struct Tally {
  int64_t values = 0, wrong = 0;
  std::string first_wrong;
};

// Every step-th float bit pattern from 0 to 1.0f, with each sign, through `coders` on the active instruction set.
std::vector<Tally> Sweep(const PreparedCodebook& cb, const std::vector<Coder>& coders, uint32_t step, int threads) {
  constexpr int64_t kChunk = 1 << 16;
  static_assert(kChunk % bnb::fuzz::kProbeGranule == 0);
  constexpr uint32_t kOne = 0x3F800000u;
  const int64_t per_sign = kOne / step + 1;
  const int64_t chunks_per_sign = (per_sign + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  std::vector<Tally> total(coders.size());
  std::mutex mu;
  const auto work = [&] {
    std::vector<float> v(kChunk);
    std::vector<uint8_t> ref(kChunk), codes(kChunk);
    std::vector<Tally> mine(coders.size());
    for (int64_t c; (c = next++) < 2 * chunks_per_sign;) {
      const uint32_t sign = c < chunks_per_sign ? 0u : 0x80000000u;
      const int64_t first = (c % chunks_per_sign) * kChunk, count = std::min(kChunk, per_sign - first);
      for (int64_t k = 0; k < kChunk; ++k) {  // the last chunk is padded with 1.0
        const int64_t i = std::min(first + k, per_sign - 1);
        v[k] = bnb::core::BitsToFloat(sign | std::min<uint32_t>(static_cast<uint32_t>(i * step), kOne));
      }
      ReferenceCodes(cb, v.data(), kChunk, ref.data());
      for (size_t j = 0; j < coders.size(); ++j) {
        bnb::fuzz::ProbeCoder(coders[j], cb, v.data(), kChunk, codes.data());
        Tally& t = mine[j];
        t.values += count;
        for (int64_t k = 0; k < count; ++k) {
          if (codes[k] == ref[k]) continue;
          if (t.wrong++ == 0) {
            char buf[128];
            std::snprintf(buf, sizeof(buf), "v = %.9g (bits %08x): code %d, expected %d", v[k],
                          bnb::core::FloatToBits(v[k]), codes[k], ref[k]);
            t.first_wrong = buf;
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (size_t j = 0; j < coders.size(); ++j) {
      total[j].values += mine[j].values;
      if (total[j].wrong == 0) total[j].first_wrong = mine[j].first_wrong;
      total[j].wrong += mine[j].wrong;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t step = 1;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string only_isa;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--step" && i + 1 < argc) {
      step = static_cast<uint32_t>(std::max(1L, std::atol(argv[++i])));
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--isa" && i + 1 < argc) {
      only_isa = argv[++i];
    } else {
      std::fprintf(stderr, "usage: coders_exhaustive [--step K] [--threads T] [--isa NAME]\n");
      return 2;
    }
  }
  std::vector<float> linear;
  for (int k = -127; k <= 128; ++k) linear.push_back(static_cast<float>(k) / 127.0f);
  const std::pair<const char*, std::vector<float>> codebooks[] = {
      {"dynamic signed", *bnb::core::CreateDynamicMap(true, 7, 8)},
      {"dynamic unsigned", *bnb::core::CreateDynamicMap(false, 7, 8)},
      {"linear k/127", linear},
  };
  const std::vector<std::string> isas = bnb::core::AvailableIsas();
  std::printf("instruction sets here: ");
  for (const auto& isa : isas) std::printf("%s ", isa.c_str());
  std::printf("(%d threads, every %u-th float)\n", threads, step);
  bool ok = true;
  for (const auto& [name, values] : codebooks) {
    const PreparedCodebook cb = *bnb::core::PrepareCodebook(values.data(), bnb::core::kCodebookSize);
    for (const std::string& isa : isas) {
      if (!only_isa.empty() && isa != only_isa) continue;
      if (!bnb::core::SetIsaCap(isa).ok()) return 2;
      const std::vector<Coder> coders = bnb::fuzz::CodersFor(cb);
      const auto start = std::chrono::steady_clock::now();
      const std::vector<Tally> tallies = Sweep(cb, coders, step, threads);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (size_t j = 0; j < coders.size(); ++j) {
        const Tally& t = tallies[j];
        std::printf("%-16s %-7s %-12s %11lld values, %s (%.0f s for the isa)\n", name, isa.c_str(),
                    bnb::fuzz::CoderName(coders[j]), static_cast<long long>(t.values), t.wrong == 0 ? "all exact" : ("WRONG " + std::to_string(t.wrong) + ", first " + t.first_wrong).c_str(),
                    seconds);
        ok &= t.wrong == 0;
      }
      std::fflush(stdout);
    }
  }
  (void)bnb::core::SetIsaCap("best");
  std::printf(ok ? "every lane has the nearest code\n" : "MISMATCH\n");
  return ok ? 0 : 1;
}
