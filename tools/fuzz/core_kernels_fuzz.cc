// Runs the core kernels' differential fuzzer (core_fuzz.h) for a while and prints the first mismatch, or how many
// cases agreed. Usage: core_kernels_fuzz [seconds (default 60)] [first seed (default: from the clock)]
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "tools/fuzz/core_fuzz.h"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 60.0;
  const uint64_t seed =
      argc > 2 ? std::strtoull(argv[2], nullptr, 10)
               : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007u;
  std::printf("fuzzing the core kernels for %.0f s from seed %" PRIu64 "\n", seconds, seed);
  std::fflush(stdout);
  const bnb::fuzz::CoreFuzzResult r = bnb::fuzz::RunCoreFuzz(seed, INT64_MAX, seconds, /*large=*/true);
  if (!r.mismatch.empty()) {
    std::printf("MISMATCH %s\n", r.mismatch.c_str());
    return 1;
  }
  std::printf("%lld cases, no mismatch\n", static_cast<long long>(r.cases));
  return 0;
}
