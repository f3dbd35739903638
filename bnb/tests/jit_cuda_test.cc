// CUDA blockwise 8-bit kernels against bnb/core's scalar CPU definition, bit for bit: codes, absmax and
// dequantized values, for every dtype, several blocksizes and thread counts, partial last blocks, misaligned
// buffers and special values. Runs the jit stack alone (no torch). Skipped, with the reason, without a GPU.
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/cuda/driver.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/tests/cuda_device_test.h"
#include "bnb/tests/special_values.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

using core::DType;
using cuda::CudaDriver;
using cuda::CUdeviceptr;
using cuda::GetCudaDriver;

using CudaTest = tests::CudaDeviceTest;

std::vector<uint8_t> MakeInput(DType t, int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int es = core::DTypeSize(t);
  std::vector<uint8_t> x(static_cast<size_t>(n) * es);
  for (int64_t i = 0; i < n; ++i) {
    float v = normal(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 7) - 3));
    if (specials) v = tests::MaybeSpecial(rng, v, 64);
    core::StoreFromFloat(t, x.data(), i, v);
  }
  if (specials && n > 300) {  // an all-zero block and a block with a huge dynamic range
    for (int64_t i = 0; i < 64; ++i) core::StoreFromFloat(t, x.data(), 128 + i, 0.0f);
  }
  return x;
}

void RunCase(CudaTest* self, KernelCache& cache, DType t, int64_t bs, int threads, int64_t n, size_t misalign,
             bool specials, const std::vector<float>& code) {
  SCOPED_TRACE(std::string(core::DTypeName(t)) + " blocksize " + std::to_string(bs) + " threads " +
               std::to_string(threads) + " n " + std::to_string(n) + " misalign " + std::to_string(misalign) +
               (specials ? " specials" : ""));
  const CudaDriver& d = **GetCudaDriver();
  const int es = core::DTypeSize(t);
  const std::vector<uint8_t> x = MakeInput(t, n, static_cast<uint32_t>(n * 31 + bs), specials);
  const int64_t nb = core::NumBlocks(n, bs);
  // CPU reference.
  auto cb = core::PrepareCodebook(code.data(), 256);
  ASSERT_TRUE(cb.ok());
  std::vector<uint8_t> want_codes(n), got_codes(n);
  std::vector<float> want_absmax(nb), got_absmax(nb);
  core::QuantizeBlockwise8Scalar(t, x.data(), *cb, {n, bs, 0, nb}, want_codes.data(), want_absmax.data());
  std::vector<uint8_t> want_out(x.size()), got_out(x.size());
  core::DequantizeBlockwise8Scalar(t, want_codes.data(), want_absmax.data(), code.data(), {n, bs, 0, nb},
                                   want_out.data());
  // GPU.
  const CUdeviceptr dx = self->Upload(x.data(), x.size(), misalign * es);
  const CUdeviceptr dcode = self->Upload(code.data(), 1024);
  const CUdeviceptr dabsmax = self->Upload(nullptr, nb * 4 + 4);
  CUdeviceptr codes_buf = 0, out_buf = 0;
  ASSERT_EQ(d.cuMemAlloc(&codes_buf, n + 64), 0);
  ASSERT_EQ(d.cuMemAlloc(&out_buf, x.size() + 64), 0);
  self->allocs_.push_back(codes_buf);
  self->allocs_.push_back(out_buf);
  uint8_t* codes_ptr = reinterpret_cast<uint8_t*>(codes_buf + misalign);
  void* out_ptr = reinterpret_cast<void*>(out_buf + misalign * es);
  const CUdeviceptr scratch = self->Upload(nullptr, kQuantizeBlockwise8ScratchBytes);
  absl::Status st = LaunchQuantizeBlockwise8(cache, 0, t, reinterpret_cast<const void*>(dx),
                                             reinterpret_cast<const float*>(dcode), codes_ptr,
                                             reinterpret_cast<float*>(dabsmax), reinterpret_cast<void*>(scratch), n,
                                             bs, nullptr, threads);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(d.cuCtxSynchronize(), 0);
  ASSERT_EQ(d.cuMemcpyDtoH(got_codes.data(), codes_buf + misalign, n), 0);
  ASSERT_EQ(d.cuMemcpyDtoH(got_absmax.data(), dabsmax, nb * 4), 0);
  EXPECT_EQ(std::memcmp(got_absmax.data(), want_absmax.data(), nb * 4), 0) << "absmax differs";
  int64_t bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (got_codes[i] != want_codes[i]) {
      ADD_FAILURE() << "code " << i << ": got " << int{got_codes[i]} << " want " << int{want_codes[i]}
                    << " x=" << core::LoadAsFloat(t, x.data(), i) << " absmax=" << want_absmax[i / bs];
      ++bad;
    }
  }
  // Dequantize the CPU's codes, so the two halves are checked independently.
  const CUdeviceptr dcodes_in = self->Upload(want_codes.data(), n, misalign);
  const CUdeviceptr dabsmax_in = self->Upload(want_absmax.data(), nb * 4);
  st = LaunchDequantizeBlockwise8(cache, 0, t, reinterpret_cast<const uint8_t*>(dcodes_in),
                                  reinterpret_cast<const float*>(dcode), reinterpret_cast<const float*>(dabsmax_in),
                                  out_ptr, n, bs, nullptr, threads);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(d.cuCtxSynchronize(), 0);
  ASSERT_EQ(d.cuMemcpyDtoH(got_out.data(), out_buf + misalign * es, x.size()), 0);
  bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (std::memcmp(&got_out[i * es], &want_out[i * es], es) != 0) {
      ADD_FAILURE() << "dequantized " << i << ": got " << core::LoadAsFloat(t, got_out.data(), i) << " want "
                    << core::LoadAsFloat(t, want_out.data(), i);
      ++bad;
    }
  }
}

TEST_F(CudaTest, EqualsCpuExactly) {
  KernelCache cache(KernelCacheOptions{nullptr, DiskCacheOptions{"", false, nullptr}, nullptr});
  const std::vector<float> dynamic = *core::CreateDynamicMap();
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (int64_t bs : {32, 64, 128, 256, 512, 1024, 2048, 4096}) {
      for (int64_t n : {int64_t{1}, bs - 1, 3 * bs + 5, int64_t{100003}}) {
        RunCase(this, cache, t, bs, 0, n, 0, true, dynamic);
      }
      RunCase(this, cache, t, bs, 0, 20011, 1, true, dynamic);  // misaligned: scalar paths
    }
    for (int threads : {32, 128, 1024}) RunCase(this, cache, t, 4096, threads, 50000, 0, true, dynamic);
  }
}

TEST_F(CudaTest, UnsortedCodebookWithTies) {
  KernelCache cache(KernelCacheOptions{nullptr, DiskCacheOptions{"", false, nullptr}, nullptr});
  std::vector<float> code = *core::CreateDynamicMap();
  std::mt19937 rng(7);
  std::shuffle(code.begin(), code.end(), rng);
  code[3] = code[200];  // more ties
  for (DType t : {DType::kFloat32, DType::kBFloat16}) RunCase(this, cache, t, 256, 0, 70001, 0, true, code);
}

TEST_F(CudaTest, LoadsFromDiskInAFreshCache) {
  // A directory of this run's own: a fixed one (TEST_TMPDIR is unset outside Bazel) keeps the kernels of the
  // previous run, and the first cache would find them on disk instead of compiling.
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/bnb_cuda_disk_XXXXXX";
  ASSERT_NE(mkdtemp(&dir[0]), nullptr) << "mkdtemp " << dir << ": " << std::strerror(errno);
  KernelCache first(KernelCacheOptions{nullptr, DiskCacheOptions{dir, true, nullptr}, nullptr});
  const std::vector<float> dynamic = *core::CreateDynamicMap();
  // Three kernels: prepare_codebook8 and quantize_blockwise8 (quantize's two launches), dequantize_blockwise8.
  RunCase(this, first, DType::kBFloat16, 64, 0, 10000, 0, false, dynamic);
  EXPECT_EQ(first.GetStats().compiles, 3);
  KernelCache second(KernelCacheOptions{nullptr, DiskCacheOptions{dir, true, nullptr}, nullptr});
  RunCase(this, second, DType::kBFloat16, 64, 0, 10000, 0, false, dynamic);
  EXPECT_EQ(second.GetStats().compiles, 0);
  EXPECT_EQ(second.GetStats().disk_hits, 3);
  std::printf("disk hit load: %.3f ms per kernel; compile: %.1f ms per kernel\n",
              second.GetStats().disk_load_ms / 3, first.GetStats().compile_ms / 3);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// A codebook with NaN or inf entries (the CPU rejects it; the CUDA path does not check, as that would wait for the
// device): every absmax is NaN, and the codes do not depend on what the scratch buffer held before (prepare_codebook8
// writes every slot it later reads).
TEST_F(CudaTest, NonFiniteCodebookGivesNanAbsmaxDeterministically) {
  KernelCache cache(KernelCacheOptions{nullptr, DiskCacheOptions{"", false, nullptr}, nullptr});
  const std::vector<float> dynamic = *core::CreateDynamicMap();
  std::vector<float> shuffled = dynamic;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(11));
  struct Case {
    const char* name;
    std::vector<float> code;
  };
  std::vector<Case> cases = {{"NaN in an increasing map", dynamic}, {"NaN, shuffled", shuffled},
                             {"two NaNs and inf, shuffled", shuffled}, {"+-inf at the ends", dynamic}};
  cases[0].code[100] = NAN;
  cases[1].code[0] = NAN;
  cases[2].code[5] = NAN;
  cases[2].code[77] = -NAN;
  cases[2].code[200] = INFINITY;
  cases[3].code[0] = -INFINITY;
  cases[3].code[255] = INFINITY;
  const int64_t n = 50000, bs = 256, nb = core::NumBlocks(n, bs);
  std::vector<float> x(n);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const CUdeviceptr dx = Upload(x.data(), n * 4);
    const CUdeviceptr dcode = Upload(c.code.data(), 1024);
    std::vector<std::vector<uint8_t>> codes;
    for (uint8_t fill : {0x00, 0xFF, 0x7F}) {
      const std::vector<uint8_t> garbage(kQuantizeBlockwise8ScratchBytes, fill);
      const CUdeviceptr scratch = Upload(garbage.data(), garbage.size());
      const CUdeviceptr dcodes = Upload(nullptr, n);
      const CUdeviceptr dabsmax = Upload(nullptr, nb * 4);
      absl::Status st = LaunchQuantizeBlockwise8(
          cache, 0, DType::kFloat32, reinterpret_cast<const void*>(dx), reinterpret_cast<const float*>(dcode),
          reinterpret_cast<uint8_t*>(dcodes), reinterpret_cast<float*>(dabsmax), reinterpret_cast<void*>(scratch), n,
          bs, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(d_->cuCtxSynchronize(), 0);
      const std::vector<uint8_t> am = Download(dabsmax, nb * 4);
      for (int64_t b = 0; b < nb; ++b) {
        float a;
        std::memcpy(&a, &am[b * 4], 4);
        ASSERT_TRUE(std::isnan(a)) << "block " << b << " absmax " << a;
      }
      codes.push_back(Download(dcodes, n));
    }
    EXPECT_EQ(codes[0], codes[1]) << "codes depend on the scratch buffer's old contents";
    EXPECT_EQ(codes[0], codes[2]) << "codes depend on the scratch buffer's old contents";
  }
}

// Managed memory for paged state: allocated, written by the host, prefetched to the device on the default stream,
// copied back through the driver, prefetched back to host memory and read there, and freed.
TEST_F(CudaTest, ManagedMemoryRoundTrips) {
  cuda::CudaRuntime& rt = cuda::GetCudaRuntime();
  const size_t bytes = size_t{3} << 20;
  absl::StatusOr<uintptr_t> address = rt.AllocManaged(0, bytes);
  ASSERT_TRUE(address.ok()) << address.status();
  auto* host = reinterpret_cast<unsigned char*>(*address);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 7);
  ASSERT_TRUE(rt.PrefetchManaged(0, *address, bytes, nullptr, /*to_host=*/false).ok());
  ASSERT_EQ(d_->cuCtxSynchronize(), 0);
  const std::vector<uint8_t> back = Download(static_cast<CUdeviceptr>(*address), bytes);
  for (size_t i = 0; i < bytes; i += 4099) ASSERT_EQ(back[i], static_cast<unsigned char>(i * 7)) << i;
  ASSERT_TRUE(rt.PrefetchManaged(0, *address, bytes, nullptr, /*to_host=*/true).ok());
  ASSERT_EQ(d_->cuCtxSynchronize(), 0);
  for (size_t i = 0; i < bytes; i += 4099) ASSERT_EQ(host[i], static_cast<unsigned char>(i * 7)) << i;
  EXPECT_TRUE(rt.FreeManaged(0, *address).ok());
  EXPECT_FALSE(rt.AllocManaged(99, 64).ok());  // no such device
}

}  // namespace
}  // namespace bnb::jit
