// NVRTC compiles every kernel the families register (kernel_registry.h), for sm_80 and sm_90 (NVRTC needs no
// GPU). Skipped, with the reason, where libnvrtc cannot be opened. Prints the compile time per kernel.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise4.h"
#include "bnb/jit/blockwise4.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/cuda/nvrtc.h"
#include "bnb/jit/cuda/nvrtc_compiler.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/kernel_sources.h"
#include "bnb/jit/optim.h"
#include "bnb/tests/test_nvrtc.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

using cuda::GetNvrtc;
using cuda::Nvrtc;
using cuda::NvrtcCompiler;

std::vector<SourceFile> Headers() {
  std::vector<SourceFile> h;
  for (const EmbeddedFile& f : KernelFiles()) h.push_back({f.name, f.text});
  return h;
}

std::string SourceFor(const KernelSpec& s) { return "#include \"" + s.template_name + ".cuh\"\n"; }

#define SKIP_WITHOUT_NVRTC()                                         \
  do {                                                               \
    absl::StatusOr<const Nvrtc*> nv = tests::TestNvrtc();            \
    if (!nv.ok()) GTEST_SKIP() << std::string(nv.status().message()); \
  } while (0)

// The version in every cache key tells patch releases apart by the library's size, which nvrtcVersion cannot.
TEST(Nvrtc, VersionNamesTheLibrarySize) {
  SKIP_WITHOUT_NVRTC();
  const Nvrtc& nv = **GetNvrtc();
  struct stat st;
  ASSERT_EQ(stat(nv.path.c_str(), &st), 0) << nv.path;
  absl::StatusOr<std::string> v = NvrtcCompiler().Version();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "nvrtc " + std::to_string(nv.major) + "." + std::to_string(nv.minor) + " (" +
                    std::to_string(st.st_size) + " bytes)");
}

TEST(Nvrtc, CompilesEveryKernelForSm80AndSm90) {
  SKIP_WITHOUT_NVRTC();
  const Nvrtc& nv = **GetNvrtc();
  std::printf("NVRTC %d.%d from %s\n", nv.major, nv.minor, nv.path.c_str());
  NvrtcCompiler compiler;
  const std::vector<SourceFile> headers = Headers();
  for (const std::string arch : {"sm_80", "sm_90"}) {
    std::map<std::string, std::vector<double>> ms_by_entry;
    for (const KernelSpec& spec : AllKernelSpecs(arch)) {
      auto options = compiler.Options(spec);
      ASSERT_TRUE(options.ok()) << options.status();
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<Binary> b = compiler.Compile(spec, SourceFor(spec), headers, *options);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->kind, BinaryKind::kCubin) << spec.DebugString();
      EXPECT_FALSE(b->lowered_name.empty());
      EXPECT_GT(b->image.size(), 1000u);
      ms_by_entry[spec.entry].push_back(ms);
      std::printf("  %-60s %7.1f ms  %6zu bytes\n", (spec.NameExpression() + " " + arch).c_str(), ms,
                  b->image.size());
    }
    for (auto& [entry, v] : ms_by_entry) {
      std::sort(v.begin(), v.end());
      std::printf("%s %s: %zu kernels, compile ms min %.1f median %.1f max %.1f\n", arch.c_str(), entry.c_str(),
                  v.size(), v.front(), v[v.size() / 2], v.back());
    }
  }
}

TEST(Nvrtc, OtherThreadCounts) {
  SKIP_WITHOUT_NVRTC();
  NvrtcCompiler compiler;
  const std::vector<SourceFile> headers = Headers();
  for (int threads : {32, 64, 128, 512, 1024}) {
    for (int64_t bs : {32, 4096}) {
      for (bool q : {true, false}) {
        KernelSpec spec = *Blockwise8Spec(q, core::DType::kBFloat16, bs, threads, "sm_90");
        absl::StatusOr<Binary> b = compiler.Compile(spec, SourceFor(spec), headers, *compiler.Options(spec));
        EXPECT_TRUE(b.ok()) << b.status();
      }
    }
  }
}

TEST(Nvrtc, OtherShapes4Bit) {
  SKIP_WITHOUT_NVRTC();
  NvrtcCompiler compiler;
  const std::vector<SourceFile> headers = Headers();
  std::vector<KernelSpec> specs;
  for (int threads : {32, 1024}) {
    for (int64_t bs : {32, 4096}) {
      specs.push_back(*Quantize4Spec(core::DType::kBFloat16, bs, core::Quant4::kFP4, threads, "sm_90"));
      specs.push_back(*Dequantize4Spec(core::DType::kFloat16, bs, threads, "sm_90"));
    }
  }
  for (auto [threads, rows] : {std::pair{32, 1}, std::pair{128, 4}, std::pair{1024, 8}}) {
    specs.push_back(*Gemv4Spec(core::DType::kFloat32, threads, rows, "sm_90"));
  }
  for (const KernelSpec& spec : specs) {
    absl::StatusOr<Binary> b = compiler.Compile(spec, SourceFor(spec), headers, *compiler.Options(spec));
    EXPECT_TRUE(b.ok()) << b.status();
  }
}

// The 8-bit optimizer update at every cuda.optim8_per_thread value (the registry holds the knob's), each rule and
// type: the vector paths of 4 and 8 elements a thread and the element paths of 1 and 2, and the WHOLE variant where
// the elements are whole vectors.
TEST(Nvrtc, Optim8PerThread) {
  SKIP_WITHOUT_NVRTC();
  NvrtcCompiler compiler;
  const std::vector<SourceFile> headers = Headers();
  int compiled = 0;
  for (int per : {2, 4, 8}) {
    for (core::DType t : {core::DType::kFloat32, core::DType::kBFloat16}) {
      for (core::OptimRule rule : {core::OptimRule::kAdam, core::OptimRule::kAdEMAMix, core::OptimRule::kLion}) {
        for (bool whole : {false, true}) {
          absl::StatusOr<KernelSpec> spec = OptimSpec("optimizer_update8", rule, t, 0, "sm_90", per, whole);
          if (whole && !Update8VectorShares(t, per)) {
            EXPECT_FALSE(spec.ok()) << "per " << per << " " << core::DTypeName(t);
            continue;
          }
          ASSERT_TRUE(spec.ok()) << spec.status();
          EXPECT_NE(spec->NameExpression().find(absl::StrCat(", 256, ", per, ", ", whole ? "true" : "false", ">")),
                    std::string::npos)
              << spec->NameExpression();
          absl::StatusOr<Binary> b = compiler.Compile(*spec, SourceFor(*spec), headers, *compiler.Options(*spec));
          EXPECT_TRUE(b.ok()) << b.status();
          ++compiled;
        }
      }
    }
  }
  EXPECT_EQ(compiled, 18 + 9);  // whole: float32 at 4 and 8, bfloat16 at 8
  EXPECT_FALSE(OptimSpec("optimizer_update8", core::OptimRule::kAdam, core::DType::kFloat32, 0, "sm_90", 3).ok());
  EXPECT_FALSE(OptimSpec("optimizer_update8", core::OptimRule::kAdam, core::DType::kFloat32, 0, "sm_90", 16).ok());
}

TEST(Nvrtc, Bad4BitShapesAreRejected) {
  EXPECT_FALSE(Quantize4Spec(core::DType::kFloat32, 48, core::Quant4::kNF4, 0, "sm_90").ok());
  EXPECT_FALSE(Dequantize4Spec(core::DType::kFloat32, 64, 96, "sm_90").ok());
  EXPECT_FALSE(Gemv4Spec(core::DType::kFloat32, 256, 9, "sm_90").ok());
  EXPECT_FALSE(Gemv4Spec(core::DType::kFloat32, 16, 1, "sm_90").ok());
}

TEST(Nvrtc, PtxBeyondKnownArchs) {
  SKIP_WITHOUT_NVRTC();
  const Nvrtc& nv = **GetNvrtc();
  ASSERT_FALSE(nv.supported_archs.empty());
  const int highest = nv.supported_archs.back();
  NvrtcCompiler compiler;
  KernelSpec spec = *Blockwise8Spec(false, core::DType::kFloat32, 256, 0, "sm_" + std::to_string(highest + 1));
  auto options = compiler.Options(spec);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_NE(std::find(options->begin(), options->end(), "-arch=compute_" + std::to_string(highest)), options->end());
  absl::StatusOr<Binary> b = compiler.Compile(spec, SourceFor(spec), Headers(), *options);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->kind, BinaryKind::kPtx);
  EXPECT_EQ(b->image.back(), '\0');
  EXPECT_NE(b->image.find(b->lowered_name), std::string::npos);
}

TEST(Nvrtc, CompileErrorCarriesLogOptionsAndSpec) {
  SKIP_WITHOUT_NVRTC();
  NvrtcCompiler compiler;
  KernelSpec spec = *Blockwise8Spec(true, core::DType::kFloat32, 256, 0, "sm_90");
  spec.template_args[0].second = "no_such_type";
  absl::StatusOr<Binary> b = compiler.Compile(spec, SourceFor(spec), Headers(), *compiler.Options(spec));
  ASSERT_FALSE(b.ok());
  const std::string msg(b.status().message());
  EXPECT_NE(msg.find("no_such_type"), std::string::npos) << msg;  // the log and the spec
  EXPECT_NE(msg.find("-arch=sm_90"), std::string::npos) << msg;   // the options
  EXPECT_NE(msg.find("NVRTC log"), std::string::npos) << msg;
  EXPECT_NE(msg.find("BLOCKSIZE=256"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bnb::jit
