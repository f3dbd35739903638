// A fixed set of the core kernels' differential fuzz cases (tools/fuzz/core_fuzz.h): random shapes, data,
// codebooks, block ranges and instruction sets against the scalar definitions. Longer runs: tools/fuzz.
#include "gtest/gtest.h"
#include "tools/fuzz/core_fuzz.h"

namespace {

TEST(CoreFuzz, FixedSeedsEqualScalar) {
  // Inputs of at most 300000 elements: the 64 MB streaming cases take seconds each and have their own tests.
  const bnb::fuzz::CoreFuzzResult r = bnb::fuzz::RunCoreFuzz(/*first_seed=*/1, /*max_cases=*/600,
                                                             /*max_seconds=*/1e9, /*large=*/false);
  EXPECT_EQ(r.mismatch, "");
  EXPECT_EQ(r.cases, 600);
}

}  // namespace
