// CUDA 4-bit kernels (bnb/jit/kernels/blockwise4.cuh) against bnb/core's scalar CPU definitions: quantize and
// dequantize bit for bit (packed bytes, absmax, outputs), gemv within float32 summation error, for every dtype,
// blocksizes 32..4096, NF4 and FP4, odd sizes, misaligned buffers, special values, values at the midpoints between
// codes, and both division paths. Runs the jit stack alone (no torch). Skipped, with the reason, without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/gemv4.h"
#include "bnb/jit/blockwise4.h"
#include "bnb/jit/cuda/driver.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/tests/core_kernel_test.h"
#include "bnb/tests/cuda_device_test.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

using core::DType;
using core::Quant4;
using cuda::CUdeviceptr;

constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

class Cuda4Test : public tests::CudaDeviceTest {
 public:
  KernelCache cache_{KernelCacheOptions{nullptr, DiskCacheOptions{"", false, nullptr}, nullptr}};
};

template <class P>
P* As(CUdeviceptr p) {
  return reinterpret_cast<P*>(p);
}

// Normal values over a wide range of magnitudes, with NaN, +-inf, +-0 and subnormals mixed in when `specials`;
// then an all-zero block, and blocks whose elements sit at, and one ulp either side of, the midpoints between codes
// times the block's absmax (where a division an ulp off would change the code), with absmax in and out of the fast
// division's range.
std::vector<uint8_t> MakeInput(DType t, Quant4 q, int64_t n, int64_t bs, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = normal(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(rng() % 7) - 3));
    if (specials) {
      switch (rng() % 64) {
        case 0: v[i] = NAN; break;
        case 1: v[i] = INFINITY; break;
        case 2: v[i] = -INFINITY; break;
        case 3: v[i] = 0.0f; break;
        case 4: v[i] = -0.0f; break;
        case 5: v[i] = 1e-40f; break;
        default: break;
      }
    }
  }
  const int64_t nb = core::NumBlocks(n, bs);
  if (nb > 2) {
    for (int64_t i = bs; i < std::min(n, 2 * bs); ++i) v[i] = 0.0f;
  }
  const core::Codebook4& cb = core::GetCodebook4(q);
  const float scales[] = {1.0f, 0.37f, 3e-5f, 7e4f, 1e-30f, 1e30f, 3e-38f, 2e38f};
  for (int64_t b = 2; b < nb; b += 3) {
    const float a = scales[(b / 3) % 8] * (1.0f + static_cast<float>(rng() % 1000) / 1000.0f);
    for (int64_t i = b * bs; i < std::min(n, (b + 1) * bs); ++i) {
      const int64_t j = i - b * bs;
      if (j == 0) {
        v[i] = (rng() & 1) ? a : -a;
        continue;
      }
      uint32_t bits = core::FloatToBits(cb.midpoints[rng() % 15] * a);
      bits = static_cast<uint32_t>(static_cast<int64_t>(bits) + static_cast<int>(rng() % 3) - 1);
      const float x = core::BitsToFloat(bits);
      v[i] = std::fabs(x) <= a ? x : 0.0f;
    }
  }
  std::vector<uint8_t> x(static_cast<size_t>(n) * core::DTypeSize(t));
  for (int64_t i = 0; i < n; ++i) core::StoreFromFloat(t, x.data(), i, v[i]);
  return x;
}

template <class F>
void ExpectSameBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int unit, const char* what,
                     const F& describe) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() / unit && bad < 5; ++i) {
    if (std::memcmp(&got[i * unit], &want[i * unit], unit) != 0) {
      ++bad;
      ADD_FAILURE() << what << " " << i << ": " << describe(i);
    }
  }
}

// Quantize x on the GPU and on the CPU and compare packed bytes and absmax; then dequantize the CPU's codes on the
// GPU (so the halves are checked independently) with `code16` and compare the outputs.
void RunQuantCase(Cuda4Test* self, DType t, Quant4 q, int64_t bs, int threads, int64_t n, size_t misalign,
                  bool specials, const std::vector<float>& code16) {
  SCOPED_TRACE(testing::Message() << core::DTypeName(t) << " " << core::Quant4Name(q) << " blocksize " << bs
                                  << " threads " << threads << " n " << n << " misalign " << misalign
                                  << (specials ? " specials" : ""));
  const int es = core::DTypeSize(t);
  const std::vector<uint8_t> x = MakeInput(t, q, n, bs, static_cast<uint32_t>(n * 31 + bs), specials);
  const int64_t nb = core::NumBlocks(n, bs);
  const int64_t np = core::PackedSize4(n);
  std::vector<uint8_t> want_packed(np);
  std::vector<float> want_absmax(nb);
  core::QuantizeBlockwise4Scalar(t, x.data(), q, {n, bs, 0, nb}, want_packed.data(), want_absmax.data());
  std::vector<uint8_t> want_out(x.size());
  core::DequantizeBlockwise4Scalar(t, want_packed.data(), want_absmax.data(), code16.data(), {n, bs, 0, nb},
                                   want_out.data());

  const CUdeviceptr dx = self->Upload(x.data(), x.size(), misalign * es);
  const CUdeviceptr dpacked = self->Upload(nullptr, np, misalign);
  const CUdeviceptr dabsmax = self->Upload(nullptr, nb * 4);
  absl::Status st = LaunchQuantizeBlockwise4(self->cache_, 0, t, q, As<const void>(dx), As<uint8_t>(dpacked),
                                             As<float>(dabsmax), n, bs, nullptr, threads);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(self->d_->cuCtxSynchronize(), 0);
  const std::vector<uint8_t> got_packed = self->Download(dpacked, np);
  const std::vector<uint8_t> got_absmax = self->Download(dabsmax, nb * 4);
  ExpectSameBytes(got_absmax, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(want_absmax.data()),
                                                   reinterpret_cast<const uint8_t*>(want_absmax.data()) + nb * 4),
                  4, "absmax", [&](size_t b) {
                    float g;
                    std::memcpy(&g, &got_absmax[b * 4], 4);
                    return testing::Message() << "got " << g << " want " << want_absmax[b];
                  });
  ExpectSameBytes(got_packed, want_packed, 1, "packed byte", [&](size_t i) {
    const int64_t e = 2 * static_cast<int64_t>(i);
    return testing::Message() << "got 0x" << std::hex << int{got_packed[i]} << " want 0x" << int{want_packed[i]}
                              << std::dec << " x=" << core::LoadAsFloat(t, x.data(), e) << ", "
                              << (e + 1 < n ? core::LoadAsFloat(t, x.data(), e + 1) : 0.0f)
                              << " absmax=" << want_absmax[e / bs];
  });

  const CUdeviceptr dpacked_in = self->Upload(want_packed.data(), np, misalign);
  const CUdeviceptr dabsmax_in = self->Upload(want_absmax.data(), nb * 4);
  const CUdeviceptr dcode = self->Upload(code16.data(), 64);
  const CUdeviceptr dout = self->Upload(nullptr, x.size(), misalign * es);
  st = LaunchDequantizeBlockwise4(self->cache_, 0, t, As<const uint8_t>(dpacked_in), As<const float>(dcode),
                                  As<const float>(dabsmax_in), As<void>(dout), n, bs, nullptr, threads);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(self->d_->cuCtxSynchronize(), 0);
  const std::vector<uint8_t> got_out = self->Download(dout, x.size());
  ExpectSameBytes(got_out, want_out, es, "dequantized", [&](size_t i) {
    return testing::Message() << "got " << core::LoadAsFloat(t, got_out.data(), i) << " want "
                              << core::LoadAsFloat(t, want_out.data(), i) << " code "
                              << int{core::PackedCode4(want_packed.data(), i)} << " absmax " << want_absmax[i / bs];
  });
}

std::vector<float> Code16(Quant4 q) { return {core::Code4(q).begin(), core::Code4(q).end()}; }

TEST_F(Cuda4Test, QuantizeDequantizeEqualCpuExactly) {
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    for (DType t : kTypes) {
      for (int64_t bs = 32; bs <= 4096; bs *= 2) {
        for (int64_t n : {int64_t{1}, int64_t{2}, bs - 1, bs, 3 * bs + 5, 7 * bs, int64_t{100003}}) {
          RunQuantCase(this, t, q, bs, 0, n, 0, true, Code16(q));
        }
        RunQuantCase(this, t, q, bs, 0, 20011, 1, true, Code16(q));  // misaligned: element paths
      }
    }
  }
}

TEST_F(Cuda4Test, OtherThreadCounts) {
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    for (DType t : kTypes) {
      for (int threads : {32, 128, 1024}) {
        for (int64_t bs : {32, 256, 4096}) RunQuantCase(this, t, q, bs, threads, 50001, 0, true, Code16(q));
      }
    }
  }
}

TEST_F(Cuda4Test, LargeTensor) {
  RunQuantCase(this, DType::kBFloat16, Quant4::kNF4, 64, 0, (int64_t{1} << 24) + 3, 0, false, Code16(Quant4::kNF4));
}

// Dequantize with other code maps (any 16 finite values, ties and -0 included) and absmax values the quantizer
// never writes: NaN, +-inf, 0, subnormal, huge.
TEST_F(Cuda4Test, DequantizeAnyMapAndSpecialAbsmax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> code16(16);
  for (float& c : code16) c = normal(rng);
  code16[3] = code16[9];
  code16[5] = -0.0f;
  code16[6] = 0.0f;
  for (DType t : kTypes) {
    for (int64_t bs : {32, 64, 4096}) {
      SCOPED_TRACE(testing::Message() << core::DTypeName(t) << " blocksize " << bs);
      const int64_t n = 40 * bs + 17, nb = core::NumBlocks(n, bs), np = core::PackedSize4(n);
      std::vector<uint8_t> packed(np);
      for (auto& b : packed) b = static_cast<uint8_t>(rng());
      std::vector<float> absmax(nb);
      const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3e38f, -2.5f};
      for (int64_t b = 0; b < nb; ++b) absmax[b] = b < 8 ? specials[b] : std::fabs(normal(rng)) * 10.0f;
      for (bool finite_map : {true, false}) {
        std::vector<float> map = code16;
        if (!finite_map) {
          map[2] = INFINITY;
          map[4] = NAN;
        }
        std::vector<uint8_t> want(n * core::DTypeSize(t));
        core::DequantizeBlockwise4Scalar(t, packed.data(), absmax.data(), map.data(), {n, bs, 0, nb}, want.data());
        const CUdeviceptr dp = Upload(packed.data(), np);
        const CUdeviceptr da = Upload(absmax.data(), nb * 4);
        const CUdeviceptr dc = Upload(map.data(), 64);
        const CUdeviceptr dout = Upload(nullptr, want.size());
        absl::Status st = LaunchDequantizeBlockwise4(cache_, 0, t, As<const uint8_t>(dp), As<const float>(dc),
                                                     As<const float>(da), As<void>(dout), n, bs, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        ASSERT_EQ(d_->cuCtxSynchronize(), 0);
        const std::vector<uint8_t> got = Download(dout, want.size());
        ExpectSameBytes(got, want, core::DTypeSize(t), finite_map ? "finite map" : "map with inf and NaN",
                        [&](size_t i) {
                          return testing::Message() << "got " << core::LoadAsFloat(t, got.data(), i) << " want "
                                                    << core::LoadAsFloat(t, want.data(), i) << " code "
                                                    << int{core::PackedCode4(packed.data(), i)} << " absmax "
                                                    << absmax[i / bs];
                        });
      }
    }
  }
}

struct GemvShape {
  int64_t n, k, blocksize;
};

// Those of core_gemv4_test (blocks across rows, odd K and N * K, rows starting mid-byte, K above a shared-memory
// tile of A: 8192 floats / 16384 halves), an LLM-sized row, K = 0 and K = 32 (one piece).
const GemvShape kGemvShapes[] = {
    {1, 32, 32},     {3, 64, 32},      {7, 100, 64},     {5, 33, 32},     {9, 1000, 128},  {2, 257, 256},
    {3, 8200, 32},   {4, 4103, 4096},  {16, 4096, 64},   {11, 77, 2048},  {6, 4097, 64},   {7, 96, 64},
    {5, 4160, 32},   {3, 8224, 4096},  {4, 8224, 64},    {2, 128, 128},   {2, 65600, 64},  {1, 65601, 32},
    {37, 16416, 64}, {300, 8192, 64},  {3, 0, 64},       {33, 32, 32},    {17, 1024, 4096}};

void RunGemvCase(Cuda4Test* self, DType t, Quant4 q, const GemvShape& s, size_t b_offset) {
  SCOPED_TRACE(testing::Message() << core::DTypeName(t) << " " << core::Quant4Name(q) << " N " << s.n << " K "
                                  << s.k << " blocksize " << s.blocksize << " B offset " << b_offset);
  std::mt19937 rng(static_cast<uint32_t>(s.n * 7919 + s.k));
  std::normal_distribution<float> normal;
  const int64_t total = s.n * s.k, nb = core::NumBlocks(total, s.blocksize), np = core::PackedSize4(total);
  std::vector<float> w(total), a(s.k);
  for (auto& v : w) v = normal(rng);
  for (auto& v : a) v = normal(rng);
  std::vector<uint8_t> packed(np);
  std::vector<float> absmax(nb);
  core::QuantizeBlockwise4Scalar(DType::kFloat32, w.data(), q, {total, s.blocksize, 0, nb}, packed.data(),
                                 absmax.data());
  std::vector<uint8_t> a_raw(s.k * core::DTypeSize(t));
  for (int64_t k = 0; k < s.k; ++k) core::StoreFromFloat(t, a_raw.data(), k, a[k]);
  const std::vector<float> code16 = Code16(q);
  std::vector<uint8_t> want(s.n * core::DTypeSize(t));
  core::Gemv4Scalar(t, a_raw.data(), packed.data(), absmax.data(), code16.data(), s.n, s.k, s.blocksize,
                    want.data(), 0, s.n);

  const CUdeviceptr da = self->Upload(a_raw.data(), a_raw.size());
  const CUdeviceptr db = self->Upload(packed.data(), np, b_offset);
  const CUdeviceptr dabs = self->Upload(absmax.data(), nb * 4);
  const CUdeviceptr dc = self->Upload(code16.data(), 64);
  const CUdeviceptr dout = self->Upload(nullptr, want.size());
  absl::Status st = LaunchGemv4(self->cache_, 0, t, As<const void>(da), As<const uint8_t>(db), As<const float>(dabs),
                                As<const float>(dc), As<void>(dout), s.n, s.k, s.blocksize, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(self->d_->cuCtxSynchronize(), 0);
  const std::vector<uint8_t> got = self->Download(dout, want.size());
  for (int64_t m = 0; m < s.n; ++m) {
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < s.k; ++k) {
      const int64_t f = m * s.k + k;
      const float wq = code16[core::PackedCode4(packed.data(), f)] * absmax[f / s.blocksize];
      const double p = double{core::LoadAsFloat(t, a_raw.data(), k)} * wq;
      ref += p;
      mag += std::fabs(p);
    }
    const double tol = tests::GemvTolerance(t, ref, mag);
    EXPECT_NEAR(core::LoadAsFloat(t, got.data(), m), ref, tol) << "row " << m;
    EXPECT_NEAR(core::LoadAsFloat(t, want.data(), m), ref, tol) << "CPU scalar, row " << m;
  }
}

TEST_F(Cuda4Test, GemvMatchesDequantizeThenDot) {
  for (Quant4 q : {Quant4::kNF4, Quant4::kFP4}) {
    for (DType t : kTypes) {
      for (const GemvShape& s : kGemvShapes) RunGemvCase(this, t, q, s, 0);
      RunGemvCase(this, t, q, {9, 4096, 64}, 1);  // B off a 16-byte boundary: the per-element path
    }
  }
}

TEST_F(Cuda4Test, GemvOtherShapes) {
  for (auto [threads, rows] : {std::pair{32, 1}, std::pair{128, 4}, std::pair{1024, 8}}) {
    SCOPED_TRACE(testing::Message() << "threads " << threads << " rows " << rows);
    for (const GemvShape& s : {GemvShape{37, 16416, 64}, GemvShape{5, 33, 32}, GemvShape{300, 8192, 64}}) {
      const int64_t total = s.n * s.k, nb = core::NumBlocks(total, s.blocksize);
      std::mt19937 rng(5);
      std::vector<uint8_t> packed(core::PackedSize4(total));
      for (auto& b : packed) b = static_cast<uint8_t>(rng());
      std::vector<float> absmax(nb, 0.5f), a(s.k);
      for (auto& v : a) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      std::vector<float> code16(16);
      for (int c = 0; c < 16; ++c) code16[c] = static_cast<float>(c - 8);
      std::vector<float> want(s.n);
      core::Gemv4Scalar(DType::kFloat32, a.data(), packed.data(), absmax.data(), code16.data(), s.n, s.k,
                        s.blocksize, want.data(), 0, s.n);
      const CUdeviceptr da = Upload(a.data(), s.k * 4);
      const CUdeviceptr db = Upload(packed.data(), packed.size());
      const CUdeviceptr dabs = Upload(absmax.data(), nb * 4);
      const CUdeviceptr dc = Upload(code16.data(), 64);
      const CUdeviceptr dout = Upload(nullptr, s.n * 4);
      absl::Status st = LaunchGemv4(cache_, 0, DType::kFloat32, As<const void>(da), As<const uint8_t>(db),
                                    As<const float>(dabs), As<const float>(dc), As<void>(dout), s.n, s.k,
                                    s.blocksize, nullptr, threads, rows);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(d_->cuCtxSynchronize(), 0);
      std::vector<float> got(s.n);
      std::memcpy(got.data(), Download(dout, s.n * 4).data(), s.n * 4);
      // Integer-valued products and sums below 2^24 (times 0.5): exact in any order.
      for (int64_t m = 0; m < s.n; ++m) EXPECT_EQ(got[m], want[m]) << "N " << s.n << " K " << s.k << " row " << m;
    }
  }
}

TEST_F(Cuda4Test, GemvExactOnIntegerValues) {
  std::vector<float> code16(16);
  for (int c = 0; c < 16; ++c) code16[c] = static_cast<float>(c - 8);
  for (DType t : kTypes) {
    for (const GemvShape& s : kGemvShapes) {
      SCOPED_TRACE(testing::Message() << core::DTypeName(t) << " N " << s.n << " K " << s.k << " blocksize "
                                      << s.blocksize);
      std::mt19937 rng(static_cast<uint32_t>(s.n + s.k));
      const int64_t total = s.n * s.k, nb = core::NumBlocks(total, s.blocksize);
      std::vector<uint8_t> packed(core::PackedSize4(total));
      for (auto& b : packed) b = static_cast<uint8_t>(rng());
      std::vector<float> absmax(nb);
      for (auto& v : absmax) v = static_cast<float>(1 + rng() % 3);
      std::vector<uint8_t> a_raw(s.k * core::DTypeSize(t));
      for (int64_t k = 0; k < s.k; ++k) {
        core::StoreFromFloat(t, a_raw.data(), k, static_cast<float>(static_cast<int>(rng() % 9) - 4));
      }
      std::vector<uint8_t> want(s.n * core::DTypeSize(t));
      core::Gemv4Scalar(t, a_raw.data(), packed.data(), absmax.data(), code16.data(), s.n, s.k, s.blocksize,
                        want.data(), 0, s.n);
      const CUdeviceptr da = Upload(a_raw.data(), a_raw.size());
      const CUdeviceptr db = Upload(packed.data(), packed.size());
      const CUdeviceptr dabs = Upload(absmax.data(), nb * 4);
      const CUdeviceptr dc = Upload(code16.data(), 64);
      const CUdeviceptr dout = Upload(nullptr, want.size());
      absl::Status st = LaunchGemv4(cache_, 0, t, As<const void>(da), As<const uint8_t>(db), As<const float>(dabs),
                                    As<const float>(dc), As<void>(dout), s.n, s.k, s.blocksize, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(d_->cuCtxSynchronize(), 0);
      const std::vector<uint8_t> got = Download(dout, want.size());
      ExpectSameBytes(got, want, core::DTypeSize(t), "row", [&](size_t m) {
        return testing::Message() << "got " << core::LoadAsFloat(t, got.data(), m) << " want "
                                  << core::LoadAsFloat(t, want.data(), m);
      });
    }
  }
}

TEST_F(Cuda4Test, BadArgumentsAreErrors) {
  EXPECT_FALSE(LaunchQuantizeBlockwise4(cache_, 0, DType::kFloat32, Quant4::kNF4, nullptr, nullptr, nullptr, 10, 100,
                                        nullptr)
                   .ok());
  EXPECT_FALSE(LaunchGemv4(cache_, 0, DType::kFloat32, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 4, 64, nullptr,
                           48)
                   .ok());
  // Nothing to do: no launch, no error.
  EXPECT_TRUE(LaunchDequantizeBlockwise4(cache_, 0, DType::kFloat32, nullptr, nullptr, nullptr, nullptr, 0, 64,
                                         nullptr)
                  .ok());
}

}  // namespace
}  // namespace bnb::jit
