// A fixed set of the core kernels' differential fuzz cases (tools/fuzz/core_fuzz.h): random shapes, data,
// codebooks, block ranges and instruction sets against the scalar definitions. Longer runs: tools/fuzz.
#include "gtest/gtest.h"
#include "tools/fuzz/core_fuzz.h"

// Fewer under the sanitizer build (core_fuzz_ubsan_test), which runs several times slower.
#ifndef BNB_FUZZ_CASES
#define BNB_FUZZ_CASES 600
#endif

namespace {

TEST(CoreFuzz, FixedSeedsEqualScalar) {
  // Inputs of at most 300000 elements: the streaming cases (stream_stores.h) have their own tests.
  const bnb::fuzz::CoreFuzzResult r = bnb::fuzz::RunCoreFuzz(/*first_seed=*/1, /*max_cases=*/BNB_FUZZ_CASES,
                                                             /*max_seconds=*/1e9, /*large=*/false);
  EXPECT_EQ(r.mismatch, "");
  EXPECT_EQ(r.cases, BNB_FUZZ_CASES);
}

}  // namespace
