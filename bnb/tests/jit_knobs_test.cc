// How the cuda.threads_per_block knob reaches the kernels: resolved in one place (ThreadsPerBlock, whose default
// the knob's doc quotes), and only through the kernel's spec, which the cache key covers: a knob value that builds
// other code gives other keys, 0 and the default it stands for give the same ones, and the configuration itself
// is no part of any key.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bnb/core/config.h"
#include "bnb/core/knobs.h"
#include "bnb/jit/fake_compiler.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/threads_per_block.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

TEST(ThreadsPerBlock, ZeroIsTheDefaultOtherValuesStand) {
  EXPECT_EQ(ThreadsPerBlock(0), core::kCudaThreadsPerBlockDefault);
  EXPECT_EQ(ThreadsPerBlock(0), 256);
  EXPECT_EQ(ThreadsPerBlock(32), 32);
  EXPECT_EQ(ThreadsPerBlock(1024), 1024);
  EXPECT_TRUE(CheckThreadsPerBlock("k", ThreadsPerBlock(0)).ok());
  EXPECT_FALSE(CheckThreadsPerBlock("k", 48).ok());
}

TEST(ThreadsPerBlock, TheKnobsDocQuotesTheDefault) {
  const core::KnobSpec* knob = core::FindKnob("cuda.threads_per_block");
  ASSERT_NE(knob, nullptr);
  EXPECT_NE(knob->doc.find(absl::StrCat("0 picks ", ThreadsPerBlock(0))), absl::string_view::npos) << knob->doc;
}

// Keys of every registered spec, by the spec's name without its arch (for lining up two knob values).
std::map<std::string, std::string> Keys(KernelCache& cache, int threads_knob) {
  std::map<std::string, std::string> keys;
  for (const KernelSpec& s : AllKernelSpecs("sm_90", threads_knob)) {
    absl::StatusOr<std::string> k = cache.Key(s);
    EXPECT_TRUE(k.ok()) << k.status();
    keys[absl::StrCat(s.entry, " ", keys.size())] = k.ok() ? *k : "";
  }
  return keys;
}

class KnobKeys : public ::testing::Test {
 protected:
  void TearDown() override { core::Config::Global().ResetRuntime(); }
  KernelCache cache_{KernelCacheOptions{std::make_shared<FakeCompiler>(), DiskCacheOptions{"", false, nullptr}}};
};

TEST_F(KnobKeys, ZeroAndTheDefaultBuildTheSameKernels) {
  EXPECT_EQ(Keys(cache_, 0), Keys(cache_, ThreadsPerBlock(0)));  // a cache warmed with either serves both
}

TEST_F(KnobKeys, AnotherValueKeysEveryKernelItShapes) {
  const std::map<std::string, std::string> base = Keys(cache_, 0), other = Keys(cache_, 128);
  ASSERT_EQ(base.size(), other.size());
  int changed = 0, taking = 0;
  for (const auto& [name, key] : base) {
    // gemv4, prepare_codebook8 and optimizer_update8 have shapes of their own; every other kernel takes the knob.
    const bool takes_knob = name.rfind("gemv4 ", 0) != 0 && name.rfind("prepare_codebook8 ", 0) != 0 &&
                            name.rfind("optimizer_update8 ", 0) != 0;
    EXPECT_EQ(other.at(name) != key, takes_knob) << name;
    changed += other.at(name) != key;
    taking += takes_knob;
  }
  EXPECT_EQ(changed, taking);
  EXPECT_GE(changed, 2 * 3 * 8 + 3 * 3 * 8);  // at least 8-bit quantize + dequantize, 4-bit NF4 + FP4 + dequantize
}

// The 8-bit optimizer update's specs take cuda.optim8_per_thread as the ops do (the registry reads the knob), so
// a warm cache holds what a run with the setting loads: the general variant for each type and rule, and the WHOLE
// one where the elements a thread are whole 16-byte vectors.
TEST_F(KnobKeys, Optim8PerThreadShapesTheRegisteredUpdates) {
  // (specs, those named with `per` elements a thread)
  const auto updates_with = [](int per) {
    int count = 0, with = 0;
    const std::string mark = absl::StrCat(", 256, ", per, ", ");
    for (const KernelSpec& s : AllKernelSpecs("sm_90", 0)) {
      if (s.entry != "optimizer_update8") continue;
      ++count;
      with += s.NameExpression().find(mark) != std::string::npos;
    }
    return std::make_pair(count, with);
  };
  EXPECT_EQ(updates_with(8), std::make_pair(2 * 3 * 6, 2 * 3 * 6));  // the default: three types, six rules, both
  ASSERT_TRUE(core::Config::Global().Set("cuda.optim8_per_thread", int64_t{4}).ok());
  EXPECT_EQ(updates_with(4), std::make_pair(4 * 6, 4 * 6));  // WHOLE only for float32
  ASSERT_TRUE(core::Config::Global().Set("cuda.optim8_per_thread", int64_t{2}).ok());
  EXPECT_EQ(updates_with(2), std::make_pair(3 * 6, 3 * 6));
  EXPECT_FALSE(core::Config::Global().Set("cuda.optim8_per_thread", int64_t{3}).ok());
  EXPECT_FALSE(core::Config::Global().Set("cuda.optim8_per_thread", int64_t{16}).ok());
}

TEST_F(KnobKeys, TheConfigurationIsNoPartOfAKey) {
  const std::map<std::string, std::string> before = Keys(cache_, 128);
  ASSERT_TRUE(core::Config::Global().Set("cuda.threads_per_block", int64_t{512}).ok());
  KernelCache fresh(KernelCacheOptions{std::make_shared<FakeCompiler>(), DiskCacheOptions{"", false, nullptr}});
  EXPECT_EQ(Keys(fresh, 128), before);
}

}  // namespace
}  // namespace bnb::jit
