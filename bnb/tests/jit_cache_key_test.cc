// Cache keys: the same spec gives the same key every time; every field of the key changes it. Also the spec's
// validation, the embedded templates and NVRTC's CUBIN/PTX option choice.
#include "bnb/jit/cache_key.h"

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/cuda/arch.h"
#include "bnb/jit/cuda/nvrtc_compiler.h"
#include "bnb/jit/fake_compiler.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/kernel_sources.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

using cuda::NvrtcOptionsFor;
using cuda::ParseArch;

KernelSpec BaseSpec() {
  KernelSpec s;
  s.template_name = "blockwise8";
  s.entry = "quantize_blockwise8";
  s.template_args = {{"T", "bnb::bf16"}, {"BLOCKSIZE", "256"}, {"THREADS", "256"}};
  s.arch = "sm_90";
  s.knobs = {{"UNROLL", "2"}};
  return s;
}

struct KeyInputs {
  KernelSpec spec = BaseSpec();
  std::string text = "template <class T> __global__ void quantize_blockwise8() {}";
  std::vector<SourceFile> headers = {{"a.cuh", "// a"}, {"b.cuh", "// b"}};
  std::string version = "nvrtc 13.0";
  std::vector<std::string> options = {"-arch=sm_90", "-std=c++17"};
  std::string Key() const { return CacheKey(spec, text, headers, version, options); }
};

TEST(CacheKey, StableAndHex) {
  const std::string k = KeyInputs().Key();
  EXPECT_EQ(k.size(), 64u);
  EXPECT_EQ(k.find_first_not_of("0123456789abcdef"), std::string::npos);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(KeyInputs().Key(), k);
  // Option order and header order do not matter (both are sorted); knob order neither.
  KeyInputs r;
  std::swap(r.options[0], r.options[1]);
  std::swap(r.headers[0], r.headers[1]);
  r.spec.knobs = {{"UNROLL", "2"}};
  EXPECT_EQ(r.Key(), k);
}

TEST(CacheKey, EveryFieldChangesTheKey) {
  const std::string base = KeyInputs().Key();
  const std::vector<std::pair<std::string, std::function<void(KeyInputs&)>>> changes = {
      {"template name", [](KeyInputs& k) { k.spec.template_name = "blockwise4"; }},
      {"template text", [](KeyInputs& k) { k.text += " "; }},
      {"header text", [](KeyInputs& k) { k.headers[1].text = "// b2"; }},
      {"header name", [](KeyInputs& k) { k.headers[1].name = "c.cuh"; }},
      {"header added", [](KeyInputs& k) { k.headers.push_back({"d.cuh", ""}); }},
      {"entry", [](KeyInputs& k) { k.spec.entry = "dequantize_blockwise8"; }},
      {"dtype", [](KeyInputs& k) { k.spec.template_args[0].second = "float"; }},
      {"blocksize", [](KeyInputs& k) { k.spec.template_args[1].second = "512"; }},
      {"threads", [](KeyInputs& k) { k.spec.template_args[2].second = "128"; }},
      {"arg name", [](KeyInputs& k) { k.spec.template_args[2].first = "NTHREADS"; }},
      {"arg order", [](KeyInputs& k) { std::swap(k.spec.template_args[1], k.spec.template_args[2]); }},
      {"arch", [](KeyInputs& k) { k.spec.arch = "sm_80"; }},
      {"knob value", [](KeyInputs& k) { k.spec.knobs[0].second = "4"; }},
      {"knob added", [](KeyInputs& k) { k.spec.knobs.push_back({"VEC", "8"}); }},
      {"compiler version", [](KeyInputs& k) { k.version = "nvrtc 13.1"; }},
      {"option", [](KeyInputs& k) { k.options.push_back("-lineinfo"); }},
      {"option value", [](KeyInputs& k) { k.options[0] = "-arch=compute_90"; }},
      // Field boundaries: moving text from one field to the next must not collide.
      {"boundary", [](KeyInputs& k) { k.spec.entry += "x"; k.spec.template_args[0].first = "X"; }},
  };
  std::set<std::string> seen = {base};
  for (const auto& [what, change] : changes) {
    KeyInputs k;
    change(k);
    const std::string key = k.Key();
    EXPECT_NE(key, base) << what;
    EXPECT_TRUE(seen.insert(key).second) << what << " collides with another change";
  }
}

TEST(CacheKey, KernelCacheKeyIsStableAndFollowsCompiler) {
  auto fake = std::make_shared<FakeCompiler>();
  KernelCache cache(KernelCacheOptions{fake, DiskCacheOptions{"", false, nullptr}, nullptr});
  absl::StatusOr<std::string> k1 = cache.Key(BaseSpec());
  ASSERT_TRUE(k1.ok()) << k1.status();
  EXPECT_EQ(*cache.Key(BaseSpec()), *k1);
  // A fresh cache (another process) computes the same key.
  KernelCache other(KernelCacheOptions{fake, DiskCacheOptions{"", false, nullptr}, nullptr});
  EXPECT_EQ(*other.Key(BaseSpec()), *k1);
  // Another compiler version gives another key.
  auto fake2 = std::make_shared<FakeCompiler>();
  fake2->version = "fake 2.0";
  KernelCache third(KernelCacheOptions{fake2, DiskCacheOptions{"", false, nullptr}, nullptr});
  EXPECT_NE(*third.Key(BaseSpec()), *k1);
  KernelSpec s = BaseSpec();
  s.arch = "sm_80";
  EXPECT_NE(*cache.Key(s), *k1);
}

TEST(KernelSpec, Validation) {
  EXPECT_TRUE(ValidateSpec(BaseSpec()).ok());
  // The arch is opaque to the spec ("gfx90a:xnack-" would do for a ROCm runtime); its spelling is the compiler's
  // to check (below, and KernelCache.KeyChecksTheTarget).
  KernelSpec s = BaseSpec();
  s.arch = "gfx90a:xnack-";
  EXPECT_TRUE(ValidateSpec(s).ok());
  for (const char* bad : {"", "sm 90", "sm_90\n", "sm_90/"}) {
    s.arch = bad;
    absl::Status st = ValidateSpec(s);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(absl::StrCat("\"", bad, "\"")), absl::string_view::npos) << st;
  }
  s = BaseSpec();
  s.entry = "bad name";
  EXPECT_FALSE(ValidateSpec(s).ok());
  s = BaseSpec();
  s.knobs = {{"1x", "2"}};
  EXPECT_FALSE(ValidateSpec(s).ok());
  EXPECT_EQ(BaseSpec().NameExpression(), "quantize_blockwise8<bnb::bf16, 256, 256>");
  EXPECT_NE(BaseSpec().DebugString().find("BLOCKSIZE=256"), std::string::npos);
  EXPECT_EQ(*ParseArch("sm_120"), 120);
  EXPECT_FALSE(ParseArch("sm_").ok());
  EXPECT_FALSE(ParseArch("compute_90").ok());
  // Other spellings of sm_80 would key a second cache that runs never hit.
  for (const char* bad : {"sm_080", "sm_80 ", " sm_80", "sm_80\n", "sm_+80", "sm_0", "sm_-80", "sm_8x0", "SM_80"}) {
    EXPECT_FALSE(ParseArch(bad).ok()) << bad;
  }
  EXPECT_NE(ParseArch("sm_080").status().message().find("\"sm_080\""), absl::string_view::npos);
}

TEST(KernelCache, KeyChecksTheTarget) {
  KernelCache cache(
      KernelCacheOptions{std::make_shared<FakeCompiler>(), DiskCacheOptions{"", false, nullptr}, nullptr});
  KernelSpec s = BaseSpec();
  s.arch = "sm_090";  // a spelling NVRTC (and the fake standing in for it) does not take
  absl::StatusOr<std::string> key = cache.Key(s);
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("\"sm_090\""), absl::string_view::npos) << key.status();
}

TEST(KernelSources, Embedded) {
  absl::StatusOr<absl::string_view> t = KernelSource("blockwise8");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->find("quantize_blockwise8"), absl::string_view::npos);
  EXPECT_NE(t->find("dequantize_blockwise8"), absl::string_view::npos);
  EXPECT_EQ(*KernelSource("blockwise8.cuh"), *t);
  absl::StatusOr<absl::string_view> missing = KernelSource("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("blockwise8"), absl::string_view::npos) << missing.status();
  const std::vector<std::string> names = KernelTemplateNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "bnb_common"), names.end());
}

// Inline assembly lives in one header, each instruction behind a wrapper that names the architectures having it.
TEST(KernelSources, InlineAsmOnlyInTheCompatHeader) {
  for (const EmbeddedFile& f : KernelFiles()) {
    const std::string text = f.text;
    if (std::string(f.name) == "ptx_compat.cuh") {
      EXPECT_NE(text.find("asm("), std::string::npos);
      continue;
    }
    for (const char* a : {"asm(", "asm (", "asm volatile", "__asm"}) {
      EXPECT_EQ(text.find(a), std::string::npos) << f.name << " holds inline assembly (" << a
                                                 << "): wrap it in kernels/ptx_compat.cuh";
    }
  }
}

TEST(NvrtcOptions, CubinWhenKnownElsePtx) {
  const std::vector<int> archs = {75, 80, 86, 89, 90, 100, 120};
  KernelSpec s = BaseSpec();
  s.knobs = {};
  auto opts = NvrtcOptionsFor(s, archs, 12, 3);
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ(*opts, (std::vector<std::string>{"-arch=sm_90", "-std=c++17"}));
  s.arch = "sm_95";  // unknown: PTX for the highest known arch below it
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 12, 3), (std::vector<std::string>{"-arch=compute_90", "-std=c++17"}));
  s.arch = "sm_130";
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 12, 3), (std::vector<std::string>{"-arch=compute_120", "-std=c++17"}));
  s.arch = "sm_70";  // older than anything NVRTC supports
  auto bad = NvrtcOptionsFor(s, archs, 12, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sm_70"), absl::string_view::npos) << bad.status();
  s.arch = "sm_90";
  s.knobs = {{"UNROLL", "4"}};
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 12, 3),
            (std::vector<std::string>{"-DBNB_KNOB_UNROLL=4", "-arch=sm_90", "-std=c++17"}));
}

TEST(NvrtcOptions, MinimalFromNvrtc12_4) {
  const std::vector<int> archs = {80, 90};
  KernelSpec s = BaseSpec();
  s.knobs = {};
  const std::vector<std::string> without = {"-arch=sm_90", "-std=c++17"};
  const std::vector<std::string> with = {"-arch=sm_90", "-minimal", "-std=c++17"};
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 11, 8), without);
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 12, 3), without);
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 12, 4), with);
  EXPECT_EQ(*NvrtcOptionsFor(s, archs, 13, 0), with);
}

TEST(Blockwise8Spec, ArgsAndErrors) {
  auto s = Blockwise8Spec(true, core::DType::kFloat16, 64, 0, "sm_80");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->NameExpression(), "quantize_blockwise8<bnb::half, 64, 256>");
  EXPECT_FALSE(Blockwise8Spec(true, core::DType::kFloat16, 48, 0, "sm_80").ok());
  EXPECT_FALSE(Blockwise8Spec(false, core::DType::kFloat32, 64, 96, "sm_80").ok());
  EXPECT_EQ(AllBlockwise8Specs("sm_90").size(), 2u * 3u * 8u + 1u);  // and prepare_codebook8
  EXPECT_EQ(AllBlockwise8Specs("sm_90").front().NameExpression(), "prepare_codebook8<256>");
  // Warm takes the threads knob as the ops do: every spec but those with shapes of their own.
  int with_512 = 0, own_shape = 0, all = 0;
  for (const KernelSpec& k : AllKernelSpecs("sm_90", 512)) {
    const std::string name = k.NameExpression();
    with_512 += name.find(", 512") != std::string::npos || name.find("<512>") != std::string::npos;
    own_shape += k.entry == "gemv4" || k.entry == "prepare_codebook8" || k.entry == "optimizer_update8";
    ++all;
  }
  EXPECT_EQ(with_512, all - own_shape);
  EXPECT_GE(with_512, 2 * 3 * 8 + 2 * 3 * 8 + 3 * 8);  // at least the blockwise 8-bit and 4-bit kernels
  DeviceInfo h100;
  h100.multiprocessors = 132;
  // 1M bf16 at blocksize 64: 8 elements per thread, 8 threads per block, 32 blocks per 256-thread tile.
  EXPECT_EQ(Blockwise8Grid(1 << 20, 64, 256, core::DType::kBFloat16, h100, 8).x, (1u << 20) / 64 / 32);
  // Large inputs: as many CTAs as the multiprocessors hold at once, by the kernel's own occupancy.
  EXPECT_EQ(Blockwise8Grid(int64_t{1} << 28, 4096, 256, core::DType::kBFloat16, h100, 8).x, 132u * 8u);
  EXPECT_EQ(Blockwise8Grid(int64_t{1} << 28, 4096, 256, core::DType::kBFloat16, h100, 5).x, 132u * 5u);
  EXPECT_EQ(Blockwise8Grid(int64_t{1} << 28, 4096, 256, core::DType::kBFloat16, h100, 0).x, 132u);  // at least 1
  EXPECT_EQ(Blockwise8Grid(5, 4096, 256, core::DType::kFloat32, h100, 8).x, 1u);
}

}  // namespace
}  // namespace bnb::jit
