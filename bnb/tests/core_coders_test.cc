// Every 8-bit quantize coder on every instruction set this CPU has, each forced (coder_probe.h), at every split of
// the dynamic maps and a linear one and 2 ulps either side, both signs, each lane checked. The sweep of every float
// in [-1, 1] is tools/fuzz:coders_exhaustive.
#include <cmath>
#include <string>
#include <vector>

#include "bnb/core/codebook.h"
#include "bnb/core/cpu_isa.h"
#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"
#include "tools/fuzz/coder_probe.h"

namespace bnb::core {
namespace {

using fuzz::Coder;
using tests::EveryIsa;

std::vector<std::vector<float>> SpecializedCodebooks() {
  std::vector<float> linear;
  for (int k = -127; k <= 128; ++k) linear.push_back(static_cast<float>(k) / 127.0f);
  return {*CreateDynamicMap(true, 7, 8), *CreateDynamicMap(false, 7, 8), linear};
}

// Every split in [-1, 1] (the midpoints, among them the segment limits and zero_limit) and 2 ulps either side, with
// both signs; padded with 1.0 to whole probe granules.
std::vector<float> SplitNeighbourhoods(const PreparedCodebook& cb) {
  std::vector<float> v;
  for (float m : cb.midpoints) {
    if (!(std::fabs(m) <= 1.0f)) continue;
    float x = std::nextafter(std::nextafter(m, -2.0f), -2.0f);
    for (int k = 0; k < 5; ++k, x = std::nextafter(x, 2.0f)) {
      if (std::fabs(x) > 1.0f) continue;
      v.push_back(x);
      v.push_back(-x);
    }
  }
  while (v.size() % fuzz::kProbeGranule != 0) v.push_back(1.0f);
  return v;
}

TEST_P(EveryIsa, EveryCoderIsExactAtEverySplit) {
  int coders_run = 0;
  for (const std::vector<float>& code : SpecializedCodebooks()) {
    const PreparedCodebook cb = *PrepareCodebook(code.data(), kCodebookSize);
    const std::vector<float> v = SplitNeighbourhoods(cb);
    for (Coder c : fuzz::CodersFor(cb)) {
      SCOPED_TRACE(fuzz::CoderName(c));
      EXPECT_EQ(fuzz::FirstWrongLane(c, cb, v.data(), static_cast<int64_t>(v.size())), "");
      ++coders_run;
    }
  }
  EXPECT_GE(coders_run, 3);  // at least the bucket coder for each codebook
}

// Which coders each instruction set runs, so a change that drops one from a target shows here.
TEST_P(EveryIsa, CodersAsExpected) {
  const std::vector<float> code = *CreateDynamicMap();
  const PreparedCodebook cb = *PrepareCodebook(code.data(), kCodebookSize);
  std::string names;
  for (Coder c : fuzz::CodersFor(cb)) names += std::string(names.empty() ? "" : " ") + fuzz::CoderName(c);
  const std::string isa = GetParam();
  // The AVX-512 targets run the AVX2 kernels (blockwise8_coders-inl.h).
  const std::string expected = isa == "scalar" || isa == "emu128" ? "bucket" : "bucket half-buckets";
  EXPECT_EQ(names, expected);
}

INSTANTIATE_TEST_SUITE_P(Coders, EveryIsa, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bnb::core
