// Launches without a GPU: the typed Launch hands the runtime pointers to exactly the arguments given, and every
// launch of the blockwise families (through a fake runtime and compiler) has the grid, block and arguments its
// kernel declares: as many arguments as the kernel's parameters in bnb/jit/kernels, each of its parameter's size.
#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/dtype.h"
#include "bnb/core/optim.h"
#include "bnb/jit/blockwise4.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/fake_compiler.h"
#include "bnb/jit/fake_runtime.h"
#include "bnb/jit/int8.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_sources.h"
#include "bnb/jit/launch.h"
#include "bnb/jit/optim.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

using core::DType;

// A loaded kernel of the fake runtime (FakeCompiler's binaries are "fake_<entry>").
class FakeDeviceTest : public ::testing::Test {
 protected:
  FakeRuntime runtime_;
  KernelCache cache_{KernelCacheOptions{std::make_shared<FakeCompiler>(), DiskCacheOptions{"", false, nullptr},
                                        nullptr, &runtime_}};

  LoadedKernel Kernel() {
    Binary b;
    b.lowered_name = "fake_kernel";
    b.image = "image";
    absl::StatusOr<LoadedKernel> k = LoadKernel(runtime_, b, 0);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : LoadedKernel{};
  }
};

struct Pair {
  int a;
  float b;
};

TEST_F(FakeDeviceTest, LaunchPassesPointersToExactlyTheArguments) {
  const LoadedKernel k = Kernel();
  const float* p = reinterpret_cast<const float*>(0x1234);
  const long long n = -5;
  const int lg = 7;
  const Pair pair{3, 0.5f};
  void* stream = reinterpret_cast<void*>(0x77);
  ASSERT_TRUE(Launch(k, Dim3{3, 2, 1}, Dim3{128}, 64, stream, p, n, lg, pair).ok());
  const std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "fake_kernel");
  EXPECT_EQ(l[0].grid.x, 3u);
  EXPECT_EQ(l[0].grid.y, 2u);
  EXPECT_EQ(l[0].block.x, 128u);
  EXPECT_EQ(l[0].block.y, 1u);
  EXPECT_EQ(l[0].shared_bytes, 64u);
  EXPECT_EQ(l[0].stream, stream);
  // The array holds the arguments' own addresses (no copies), in order, with their sizes.
  EXPECT_EQ(l[0].arg_addresses, (std::vector<const void*>{&p, &n, &lg, &pair}));
  ASSERT_EQ(l[0].arg_bytes.size(), 4u);
  EXPECT_EQ(l[0].arg_bytes[0].size(), sizeof(void*));
  EXPECT_EQ(l[0].arg_bytes[1].size(), 8u);
  EXPECT_EQ(l[0].arg_bytes[2].size(), 4u);
  EXPECT_EQ(l[0].arg_bytes[3].size(), sizeof(Pair));
  EXPECT_EQ(l[0].Arg<const float*>(0), p);
  EXPECT_EQ(l[0].Arg<long long>(1), -5);
  EXPECT_EQ(l[0].Arg<int>(2), 7);
  EXPECT_EQ(l[0].Arg<Pair>(3).b, 0.5f);
}

TEST_F(FakeDeviceTest, LaunchWithoutArgumentsAndOfAnUnloadedKernel) {
  ASSERT_TRUE(Launch(Kernel(), Dim3{}, Dim3{32}, 0, nullptr).ok());
  EXPECT_TRUE(runtime_.launches().at(0).arg_bytes.empty());
  absl::Status st = Launch(LoadedKernel{}, Dim3{}, Dim3{32}, 0, nullptr, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("never loaded"), absl::string_view::npos) << st;
}

TEST_F(FakeDeviceTest, LoadFailureNamesTheImageAndDevice) {
  Binary b;
  b.kind = BinaryKind::kPtx;
  b.lowered_name = "k";
  b.image = "ptx";
  absl::StatusOr<LoadedKernel> k = LoadKernel(runtime_, b, 3);  // the fake has one device
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("(PTX, 3 bytes, kernel k) on fake device 3"), absl::string_view::npos)
      << k.status();
  b.lowered_name = "";  // the fake finds no function of that name: the module is unloaded again
  EXPECT_FALSE(LoadKernel(runtime_, b, 0).ok());
  EXPECT_EQ(runtime_.modules_loaded(), 0);
}

TEST_F(FakeDeviceTest, KernelsLoadOncePerDevice) {
  runtime_.devices = 2;
  const KernelSpec spec = *Blockwise8Spec(false, DType::kFloat32, 256, 0, "");
  ASSERT_TRUE(cache_.GetKernel(spec, 0).ok());
  ASSERT_TRUE(cache_.GetKernel(spec, 0).ok());
  EXPECT_EQ(runtime_.modules_loaded(), 1);
  absl::StatusOr<LoadedKernel> on1 = cache_.GetKernel(spec, 1);
  ASSERT_TRUE(on1.ok()) << on1.status();
  EXPECT_EQ(on1->device, 1);
  EXPECT_EQ(on1->runtime, &runtime_);
  EXPECT_EQ(runtime_.modules_loaded(), 2);
  EXPECT_FALSE(cache_.GetKernel(spec, 2).ok());
}

// The byte sizes of `entry`'s parameters as kernels/<template>.cuh declares them: a pointer, long long, int,
// unsigned or float each (the types the kernels take); an empty vector (and a test failure) otherwise.
std::vector<size_t> DeclaredParameterSizes(const std::string& template_name, const std::string& entry) {
  const std::string text(*KernelSource(template_name));
  // The first "entry(" between a __global__ and the end of its declaration, not the tail of a longer name.
  size_t at = std::string::npos;
  for (size_t g = text.find("__global__"); g != std::string::npos && at == std::string::npos;
       g = text.find("__global__", g + 1)) {
    const size_t e = text.find(entry + "(", g);
    const char before = e == std::string::npos ? ' ' : text[e - 1];
    if (e < text.find_first_of("{;", g) && !std::isalnum(static_cast<unsigned char>(before)) && before != '_') at = e;
  }
  if (at == std::string::npos) {
    ADD_FAILURE() << "no __global__ " << entry << "( in " << template_name << ".cuh";
    return {};
  }
  const size_t open = at + entry.size();
  const size_t close = text.find(')', open);
  std::vector<size_t> sizes;
  for (absl::string_view param : absl::StrSplit(text.substr(open + 1, close - open - 1), ',')) {
    std::string p(absl::StripAsciiWhitespace(param));
    if (p.find('*') != std::string::npos) {
      sizes.push_back(sizeof(void*));
      continue;
    }
    p = p.substr(0, p.find_last_of(" \n") + 1);  // drop the parameter's name
    p = std::string(absl::StripAsciiWhitespace(absl::StripPrefix(p, "const ")));
    if (p == "long long") {
      sizes.push_back(sizeof(long long));
    } else if (p == "int" || p == "unsigned" || p == "unsigned int" || p == "float") {
      sizes.push_back(4);
    } else {
      ADD_FAILURE() << entry << ": parameter \"" << std::string(param) << "\" of a type this check does not know";
      return {};
    }
  }
  return sizes;
}

// The launch's arguments match its kernel's declared parameters, count and sizes.
void ExpectArgumentsFitTheKernel(const FakeRuntime::Launched& l, const std::string& template_name,
                                 const std::string& entry) {
  EXPECT_EQ(l.function, "fake_" + entry);
  std::vector<size_t> got;
  for (const std::string& b : l.arg_bytes) got.push_back(b.size());
  EXPECT_EQ(got, DeclaredParameterSizes(template_name, entry)) << entry;
}

template <class T>
T* Fake(uintptr_t v) {
  return reinterpret_cast<T*>(v);
}

TEST_F(FakeDeviceTest, QuantizeBlockwise8) {
  const int64_t n = int64_t{1} << 20;
  void* stream = Fake<void>(0x5);
  ASSERT_TRUE(LaunchQuantizeBlockwise8(cache_, 0, DType::kBFloat16, Fake<const void>(0x100), Fake<const float>(0x200),
                                       Fake<uint8_t>(0x300), Fake<float>(0x400), Fake<void>(0x500), n, 64, stream)
                  .ok());
  const std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 2u);
  // The codebook is prepared into the scratch buffer first, by one CTA, on the same stream.
  ExpectArgumentsFitTheKernel(l[0], "blockwise8", "prepare_codebook8");
  EXPECT_EQ(l[0].grid.x, 1u);
  EXPECT_EQ(l[0].block.x, static_cast<unsigned>(kPrepareCodebook8Threads));
  EXPECT_EQ(l[0].stream, stream);
  EXPECT_EQ(l[0].Arg<const float*>(0), Fake<const float>(0x200));
  EXPECT_EQ(l[0].Arg<void*>(1), Fake<void>(0x500));
  ExpectArgumentsFitTheKernel(l[1], "blockwise8", "quantize_blockwise8");
  EXPECT_NE(l[1].image.find("quantize_blockwise8<T=bnb::bf16, BLOCKSIZE=64, THREADS=256> sm_90"), std::string::npos)
      << l[1].image;
  DeviceInfo device{0, "sm_90", runtime_.multiprocessors};
  EXPECT_EQ(l[1].grid.x, Blockwise8Grid(n, 64, 256, DType::kBFloat16, device, runtime_.resident_ctas_per_sm).x);
  EXPECT_EQ(l[1].block.x, 256u);
  EXPECT_EQ(l[1].stream, stream);
  EXPECT_EQ(l[1].Arg<const void*>(0), Fake<const void>(0x100));
  EXPECT_EQ(l[1].Arg<void*>(1), Fake<void>(0x500));
  EXPECT_EQ(l[1].Arg<uint8_t*>(2), Fake<uint8_t>(0x300));
  EXPECT_EQ(l[1].Arg<float*>(3), Fake<float>(0x400));
  EXPECT_EQ(l[1].Arg<long long>(4), n);
}

// The 8-bit optimizer update: both codebooks prepared, the whole blocks by the WHOLE variant, the partial last one
// by the general kernel with every buffer advanced past them; and a kernel that fails to compile launches nothing,
// so p and the states stay as they were.
TEST_F(FakeDeviceTest, OptimizerUpdate8WholeBlocksThenTheRest) {
  const core::OptimStep step =
      core::MakeOptimStep(core::OptimRule::kAdam, true, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, 1, 1e-3, 1.0, false);
  // Adam's two states, p at address p_at, n elements, through `cache`.
  const auto update = [&](KernelCache& cache, uintptr_t p_at, int64_t n) {
    return LaunchOptimizerUpdate8(cache, 0, step, DType::kFloat32, Fake<const void>(0x1000), Fake<void>(p_at),
                                  Fake<uint8_t>(0x3000), nullptr, Fake<uint8_t>(0x4000), Fake<const float>(0x500),
                                  Fake<const float>(0x600), Fake<float>(0x7000), nullptr, Fake<float>(0x8000),
                                  Fake<void>(0x9000), n, nullptr, 8);
  };
  ASSERT_TRUE(update(cache_, 0x2000, 1000).ok());
  std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].function, "fake_prepare_codebook8");
  EXPECT_EQ(l[1].function, "fake_prepare_codebook8");
  EXPECT_EQ(l[1].Arg<void*>(1), Fake<void>(0x9000 + kQuantizeBlockwise8ScratchBytes));
  EXPECT_NE(l[2].image.find("WHOLE=true"), std::string::npos) << l[2].image;
  EXPECT_EQ(l[2].Arg<const void*>(0), Fake<const void>(0x1000));
  EXPECT_EQ(l[2].Arg<long long>(13), 768);
  EXPECT_NE(l[3].image.find("WHOLE=false"), std::string::npos) << l[3].image;
  EXPECT_EQ(l[3].Arg<const void*>(0), Fake<const void>(0x1000 + 768 * 4));  // g and p: 768 floats on
  EXPECT_EQ(l[3].Arg<void*>(1), Fake<void>(0x2000 + 768 * 4));
  EXPECT_EQ(l[3].Arg<uint8_t*>(2), Fake<uint8_t>(0x3000 + 768));            // the codes: 768 bytes on
  EXPECT_EQ(l[3].Arg<uint8_t*>(3), nullptr);
  EXPECT_EQ(l[3].Arg<uint8_t*>(4), Fake<uint8_t>(0x4000 + 768));
  EXPECT_EQ(l[3].Arg<float*>(9), Fake<float>(0x7000 + 3 * 4));               // absmax: 3 blocks on
  EXPECT_EQ(l[3].Arg<float*>(11), Fake<float>(0x8000 + 3 * 4));
  EXPECT_EQ(l[3].Arg<long long>(13), 232);

  // A misaligned p: all by the general kernel.
  ASSERT_TRUE(update(cache_, 0x2004, 1024).ok());
  l = runtime_.launches();
  ASSERT_EQ(l.size(), 4u + 3u);
  EXPECT_NE(l[6].image.find("WHOLE=false"), std::string::npos) << l[6].image;
  EXPECT_EQ(l[6].Arg<long long>(13), 1024);

  // Whole blocks only, then a call that needs a kernel which fails to compile: nothing launches.
  const auto compiler = std::make_shared<FakeCompiler>();
  KernelCache failing{KernelCacheOptions{compiler, DiskCacheOptions{"", false, nullptr}, nullptr, &runtime_}};
  ASSERT_TRUE(update(failing, 0x2000, 512).ok());
  const size_t before = runtime_.launches().size();
  compiler->fail = true;
  EXPECT_FALSE(update(failing, 0x2000, 1000).ok());  // the general kernel, not yet compiled
  EXPECT_EQ(runtime_.launches().size(), before);
}

TEST_F(FakeDeviceTest, DequantizeBlockwise8) {
  ASSERT_TRUE(LaunchDequantizeBlockwise8(cache_, 0, DType::kFloat16, Fake<const uint8_t>(0x100),
                                         Fake<const float>(0x200), Fake<const float>(0x300), Fake<void>(0x400), 1000,
                                         256, nullptr, 512)
                  .ok());
  const std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 1u);
  ExpectArgumentsFitTheKernel(l[0], "blockwise8", "dequantize_blockwise8");
  EXPECT_NE(l[0].image.find("THREADS=512"), std::string::npos) << l[0].image;
  EXPECT_EQ(l[0].block.x, 512u);
  EXPECT_EQ(l[0].Arg<const uint8_t*>(0), Fake<const uint8_t>(0x100));
  EXPECT_EQ(l[0].Arg<const float*>(1), Fake<const float>(0x200));
  EXPECT_EQ(l[0].Arg<const float*>(2), Fake<const float>(0x300));
  EXPECT_EQ(l[0].Arg<void*>(3), Fake<void>(0x400));
  EXPECT_EQ(l[0].Arg<long long>(4), 1000);
}

TEST_F(FakeDeviceTest, QuantizeAndDequantizeBlockwise4) {
  ASSERT_TRUE(LaunchQuantizeBlockwise4(cache_, 0, DType::kFloat32, core::Quant4::kFP4, Fake<const void>(0x100),
                                       Fake<uint8_t>(0x200), Fake<float>(0x300), 4097, 128, nullptr)
                  .ok());
  ASSERT_TRUE(LaunchDequantizeBlockwise4(cache_, 0, DType::kBFloat16, Fake<const uint8_t>(0x100),
                                         Fake<const float>(0x200), Fake<const float>(0x300), Fake<void>(0x400), 4097,
                                         128, nullptr)
                  .ok());
  const std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 2u);
  ExpectArgumentsFitTheKernel(l[0], "blockwise4", "quantize_blockwise4");
  EXPECT_NE(l[0].image.find("BLOCKSIZE=128, THREADS=256, QUANT=1"), std::string::npos) << l[0].image;
  EXPECT_EQ(l[0].Arg<const void*>(0), Fake<const void>(0x100));
  EXPECT_EQ(l[0].Arg<uint8_t*>(1), Fake<uint8_t>(0x200));
  EXPECT_EQ(l[0].Arg<float*>(2), Fake<float>(0x300));
  EXPECT_EQ(l[0].Arg<long long>(3), 4097);
  ExpectArgumentsFitTheKernel(l[1], "blockwise4", "dequantize_blockwise4");
  EXPECT_EQ(l[1].Arg<const uint8_t*>(0), Fake<const uint8_t>(0x100));
  EXPECT_EQ(l[1].Arg<const float*>(1), Fake<const float>(0x200));
  EXPECT_EQ(l[1].Arg<const float*>(2), Fake<const float>(0x300));
  EXPECT_EQ(l[1].Arg<void*>(3), Fake<void>(0x400));
  EXPECT_EQ(l[1].Arg<long long>(4), 4097);
}

TEST_F(FakeDeviceTest, Gemv4) {
  ASSERT_TRUE(LaunchGemv4(cache_, 0, DType::kBFloat16, Fake<const void>(0x100), Fake<const uint8_t>(0x200),
                          Fake<const float>(0x300), Fake<const float>(0x400), Fake<void>(0x500), 100, 4096, 64,
                          Fake<void>(0x9))
                  .ok());
  const std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 1u);
  ExpectArgumentsFitTheKernel(l[0], "blockwise4", "gemv4");
  EXPECT_EQ(l[0].grid.x, Gemv4Grid(100, 0, 0)->x);
  EXPECT_EQ(l[0].block.x, static_cast<unsigned>(kDefaultGemv4Threads));
  EXPECT_EQ(l[0].stream, Fake<void>(0x9));
  EXPECT_EQ(l[0].Arg<const void*>(0), Fake<const void>(0x100));
  EXPECT_EQ(l[0].Arg<const uint8_t*>(1), Fake<const uint8_t>(0x200));
  EXPECT_EQ(l[0].Arg<const float*>(2), Fake<const float>(0x300));
  EXPECT_EQ(l[0].Arg<const float*>(3), Fake<const float>(0x400));
  EXPECT_EQ(l[0].Arg<void*>(4), Fake<void>(0x500));
  EXPECT_EQ(l[0].Arg<long long>(5), 100);
  EXPECT_EQ(l[0].Arg<long long>(6), 4096);
  EXPECT_EQ(l[0].Arg<int>(7), 6);  // log2 of the blocksize
}

TEST_F(FakeDeviceTest, Int8Passes) {
  void* stream = Fake<void>(0x5);
  ASSERT_TRUE(LaunchInt8QuantizeRows(cache_, 0, DType::kFloat16, Fake<const void>(0x100), 300, 4096, 6.0f,
                                     Fake<int8_t>(0x200), Fake<float>(0x300), Fake<uint8_t>(0x400), stream)
                  .ok());
  ASSERT_TRUE(LaunchInt8QuantizeColumns(cache_, 0, DType::kBFloat16, Fake<const void>(0x100), 300, 4096, 0.0f,
                                        Fake<float>(0x500), Fake<int8_t>(0x600), stream)
                  .ok());
  ASSERT_TRUE(LaunchInt8DequantizeRows(cache_, 0, Fake<const int8_t>(0x700), Fake<const float>(0x800), 300, 64,
                                       Fake<float>(0x900), stream, 512)
                  .ok());
  ASSERT_TRUE(LaunchInt8DequantizeProduct(cache_, 0, Fake<const int32_t>(0xA00), Fake<const float>(0xB00),
                                          Fake<const float>(0xC00), DType::kFloat16, nullptr, 17, 96,
                                          DType::kBFloat16, Fake<void>(0xD00), stream)
                  .ok());
  ASSERT_TRUE(LaunchInt8ScaledGemv(cache_, 0, Fake<const int8_t>(0xE00), Fake<const int8_t>(0xF00),
                                   Fake<const float>(0xB00), Fake<const float>(0xC00), DType::kFloat32, nullptr, 5,
                                   1000, 4096, DType::kFloat16, Fake<void>(0xD00), stream)
                  .ok());
  // The one-pass product takes 1 to 16 rows, K a multiple of 16 and aligned codes; the caller falls back otherwise.
  EXPECT_FALSE(LaunchInt8ScaledGemv(cache_, 0, Fake<const int8_t>(0xE00), Fake<const int8_t>(0xF00),
                                    Fake<const float>(0xB00), Fake<const float>(0xC00), DType::kFloat32, nullptr, 17,
                                    1000, 4096, DType::kFloat16, Fake<void>(0xD00), stream)
                   .ok());
  EXPECT_FALSE(Int8ScaledGemvFits(1, 4104, Fake<const int8_t>(0xE00), Fake<const int8_t>(0xF00)));
  EXPECT_FALSE(Int8ScaledGemvFits(1, 4096, Fake<const int8_t>(0xE01), Fake<const int8_t>(0xF00)));
  ASSERT_TRUE(LaunchInt8DequantizeColumns(cache_, 0, DType::kBFloat16, Fake<const int8_t>(0xF00), 1000, 4096,
                                          Fake<const float>(0xC00), Fake<const int64_t>(0x1000), 3, Fake<void>(0xD00),
                                          stream)
                  .ok());
  const std::vector<FakeRuntime::Launched> l = runtime_.launches();
  ASSERT_EQ(l.size(), 7u);
  ExpectArgumentsFitTheKernel(l[6], "int8", "int8_dequantize_columns");
  EXPECT_EQ(l[6].Arg<long long>(1), 4096);
  EXPECT_EQ(l[6].Arg<long long>(4), 3);
  EXPECT_EQ(l[6].Arg<long long>(5), 3000);
  ExpectArgumentsFitTheKernel(l[5], "int8", "int8_scaled_gemv");
  // 5 rows take the 16-row kernel, 4 columns a warp: 1000 columns in 32 CTAs of 8 warps.
  EXPECT_NE(l[5].image.find("int8_scaled_gemv<T=bnb::half, B=float, R=16, C=4, THREADS=256>"), std::string::npos)
      << l[5].image;
  EXPECT_EQ(l[5].grid.x, 32u);
  EXPECT_EQ(l[5].Arg<int>(5), 5);
  EXPECT_EQ(l[5].Arg<long long>(6), 1000);
  EXPECT_EQ(l[5].Arg<long long>(7), 4096);
  ExpectArgumentsFitTheKernel(l[0], "int8", "int8_quantize_rows");
  EXPECT_NE(l[0].image.find("int8_quantize_rows<T=bnb::half, THREADS=256>"), std::string::npos) << l[0].image;
  EXPECT_EQ(l[0].grid.x, 300u);  // a CTA per row
  EXPECT_EQ(l[0].Arg<long long>(1), 300);
  EXPECT_EQ(l[0].Arg<long long>(2), 4096);
  EXPECT_EQ(l[0].Arg<float>(3), 6.0f);
  EXPECT_EQ(l[0].Arg<uint8_t*>(6), Fake<uint8_t>(0x400));
  ExpectArgumentsFitTheKernel(l[1], "int8", "int8_column_absmax");
  // Columns across CTAs, rows in chunks: every (column, row) pair is covered once.
  const long long rows_per_cta = l[1].Arg<long long>(4);
  EXPECT_EQ(l[1].grid.x * 256u, 4096u);
  EXPECT_GE(l[1].grid.y * rows_per_cta, 300);
  EXPECT_LT((l[1].grid.y - 1) * rows_per_cta, 300);
  ExpectArgumentsFitTheKernel(l[2], "int8", "int8_quantize_columns");
  EXPECT_EQ(l[2].Arg<const float*>(4), Fake<const float>(0x500));
  EXPECT_EQ(l[2].Arg<long long>(1), 300 * 4096);
  ExpectArgumentsFitTheKernel(l[3], "int8", "int8_dequantize_rows");
  EXPECT_EQ(l[3].block.x, 512u);
  EXPECT_EQ(l[3].Arg<long long>(2), 300 * 64);
  EXPECT_EQ(l[3].Arg<long long>(3), 64);
  ExpectArgumentsFitTheKernel(l[4], "int8", "int8_dequantize_product");
  EXPECT_NE(l[4].image.find("int8_dequantize_product<T=bnb::bf16, B=bnb::half, THREADS=256>"), std::string::npos);
  EXPECT_EQ(l[4].Arg<const void*>(3), nullptr);
  EXPECT_EQ(l[4].Arg<long long>(4), 17 * 96);
  EXPECT_EQ(l[4].Arg<long long>(5), 96);
}

TEST_F(FakeDeviceTest, NothingToDoLaunchesNothing) {
  EXPECT_TRUE(LaunchQuantizeBlockwise8(cache_, 0, DType::kFloat32, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 64,
                                       nullptr)
                  .ok());
  EXPECT_TRUE(LaunchGemv4(cache_, 0, DType::kFloat32, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 64, 64, nullptr)
                  .ok());
  EXPECT_TRUE(runtime_.launches().empty());
}

// The managed-memory seam as the fake runtime keeps it: allocations live until freed, prefetches recorded, a free of
// what was never allocated and a device that does not exist refused.
TEST_F(FakeDeviceTest, ManagedMemoryBookkeeping) {
  absl::StatusOr<uintptr_t> a = runtime_.AllocManaged(0, 4096);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(runtime_.managed_allocations(), 1u);
  int stream = 0;
  ASSERT_TRUE(runtime_.PrefetchManaged(0, *a, 4096, &stream, /*to_host=*/false).ok());
  ASSERT_TRUE(runtime_.PrefetchManaged(0, *a, 1024, &stream, /*to_host=*/true).ok());
  ASSERT_EQ(runtime_.prefetches().size(), 2u);
  EXPECT_EQ(runtime_.prefetches()[0].address, *a);
  EXPECT_EQ(runtime_.prefetches()[0].stream, &stream);
  EXPECT_FALSE(runtime_.prefetches()[0].to_host);
  EXPECT_EQ(runtime_.prefetches()[1].bytes, 1024u);
  EXPECT_TRUE(runtime_.prefetches()[1].to_host);
  EXPECT_FALSE(runtime_.PrefetchManaged(5, *a, 4096, &stream, false).ok());  // no such device
  EXPECT_FALSE(runtime_.FreeManaged(0, *a + 1).ok());
  EXPECT_TRUE(runtime_.FreeManaged(0, *a).ok());
  EXPECT_EQ(runtime_.managed_allocations(), 0u);
  EXPECT_FALSE(runtime_.AllocManaged(5, 64).ok());
  EXPECT_FALSE(runtime_.AllocManaged(0, 0).ok());
}

}  // namespace
}  // namespace bnb::jit
