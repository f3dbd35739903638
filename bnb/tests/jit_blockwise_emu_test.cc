// The CUDA blockwise kernels (kernels/blockwise8.cuh, blockwise4.cuh) run on the CPU by cuda_emu.h, against
// bnb/core bit for bit, no GPU needed: 8-bit quantize and dequantize, NF4 / FP4 quantize and dequantize, gemv4 with
// exact (integer) products on its vector, tiled and element paths, float32,
// float16 and bfloat16, small and large blocks, 256 threads and other counts, whole and partial last blocks,
// misaligned buffers, special values (a zero block, NaN, +-inf, subnormals, huge values), fewer CTAs than tiles.
#include "bnb/tests/cuda_emu.h"
// The kernels as host C++ (after the emulator, which defines what they need).
#include "bnb/jit/blockwise4_host.h"
#include "bnb/jit/blockwise8_host.h"
#include "bnb/tests/cuda_emu_checks.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/dtype.h"
#include "bnb/core/gemv4.h"
#include "gtest/gtest.h"

namespace bnb {
namespace {

using core::DType;
using emu::DTypeOf;
using emu::FirstDiff;

using Buffer = emu::GuardedBuffer;  // the kernels' buffers, a guard page after each (cuda_emu.h)

// The absmax floats of `blocks` blocks in a guarded buffer.
float* Floats(Buffer& b) { return reinterpret_cast<float*>(b.data()); }

// n values of `dtype`: normal * 3, then a zero block, NaN, +-inf, subnormals and huge values where n allows.
void Fill(DType dtype, int64_t n, int64_t blocksize, unsigned seed, void* x) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t i = 0; i < n; ++i) core::StoreFromFloat(dtype, x, i, normal(rng));
  const auto set = [&](int64_t i, float v) {
    if (i < n) core::StoreFromFloat(dtype, x, i, v);
  };
  for (int64_t i = blocksize; i < 2 * blocksize; ++i) set(i, 0.0f);
  set(2 * blocksize + 3, NAN);
  set(3 * blocksize + 1, INFINITY);
  set(3 * blocksize + 2, -INFINITY);
  for (int64_t i = 4 * blocksize; i < 4 * blocksize + 9; ++i) set(i, 1e-40f * static_cast<float>(i % 5 - 2));
  set(5 * blocksize + 7, 3e38f);
}


// prepare_codebook8 run as the GPU runs it (one CTA of 256).
void Prepare(const std::vector<float>& code, bw8::Prepared* out) {
  emu::Launch(1, 256, prepare_codebook8<256>, code.data(), out);
}

template <class T, int kBlock, int kThreads>
void Check8(int64_t n, int64_t misalign, unsigned ctas) {
  constexpr DType dtype = DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat("8-bit ", core::DTypeName(dtype), " blocksize ", kBlock, " threads ", kThreads, " n ", n,
                            " misalign ", misalign, " ctas ", ctas));
  const int64_t size = core::DTypeSize(dtype), blocks = (n + kBlock - 1) / kBlock;
  const std::vector<float> code = *core::CreateDynamicMap(true);
  const core::PreparedCodebook cb = *core::PrepareCodebook(code.data(), 256);
  alignas(16) static bw8::Prepared prep;
  Prepare(code, &prep);
  Buffer x(n * size, misalign * size), codes(n, misalign), codes_cpu(n, 0);
  Fill(dtype, n, kBlock, static_cast<unsigned>(n + kBlock), x.data());
  Buffer absmax_bytes(blocks * 4);
  float* absmax = Floats(absmax_bytes);
  std::vector<float> absmax_cpu(blocks);
  const core::Blockwise8Range range{n, kBlock, 0, blocks};

  core::QuantizeBlockwise8(dtype, x.data(), cb, range, codes_cpu.data(), absmax_cpu.data());
  emu::Launch(ctas, kThreads, quantize_blockwise8<T, kBlock, kThreads>, reinterpret_cast<const T*>(x.data()), &prep,
              codes.data(), absmax, static_cast<long long>(n));
  EXPECT_EQ(FirstDiff(codes.data(), codes_cpu.data(), n), -1) << "codes";
  EXPECT_EQ(FirstDiff(absmax, absmax_cpu.data(), blocks * 4), -1) << "absmax";

  Buffer out(n * size, misalign * size), out_cpu(n * size, 0);
  core::DequantizeBlockwise8(dtype, codes_cpu.data(), absmax_cpu.data(), cb, range, out_cpu.data());
  emu::Launch(ctas, kThreads, dequantize_blockwise8<T, kBlock, kThreads>, codes.data(), code.data(), absmax,
              reinterpret_cast<T*>(out.data()), static_cast<long long>(n));
  EXPECT_EQ(FirstDiff(out.data(), out_cpu.data(), n * size), -1) << "dequantized";
}

template <class T, int kBlock, int kThreads>
void Check4(core::Quant4 q, int64_t n, int64_t misalign, unsigned ctas) {
  constexpr DType dtype = DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat("4-bit ", core::Quant4Name(q), " ", core::DTypeName(dtype), " blocksize ", kBlock,
                            " threads ", kThreads, " n ", n, " misalign ", misalign, " ctas ", ctas));
  const int64_t size = core::DTypeSize(dtype), blocks = (n + kBlock - 1) / kBlock, bytes = core::PackedSize4(n);
  Buffer x(n * size, misalign * size), packed(bytes, misalign), packed_cpu(bytes, 0);
  Fill(dtype, n, kBlock, static_cast<unsigned>(3 * n + kBlock), x.data());
  Buffer absmax_bytes(blocks * 4);
  float* absmax = Floats(absmax_bytes);
  std::vector<float> absmax_cpu(blocks);
  const core::Blockwise4Range range{n, kBlock, 0, blocks};

  core::QuantizeBlockwise4(dtype, x.data(), q, range, packed_cpu.data(), absmax_cpu.data());
  const auto quantize = q == core::Quant4::kNF4 ? quantize_blockwise4<T, kBlock, kThreads, cb4::kNF4>
                                                : quantize_blockwise4<T, kBlock, kThreads, cb4::kFP4>;
  emu::Launch(ctas, kThreads, quantize, reinterpret_cast<const T*>(x.data()), packed.data(), absmax,
              static_cast<long long>(n));
  EXPECT_EQ(FirstDiff(packed.data(), packed_cpu.data(), bytes), -1) << "packed codes";
  EXPECT_EQ(FirstDiff(absmax, absmax_cpu.data(), blocks * 4), -1) << "absmax";

  const float* code16 = core::Code4(q).data();
  Buffer out(n * size, misalign * size), out_cpu(n * size, 0);
  core::DequantizeBlockwise4(dtype, packed_cpu.data(), absmax_cpu.data(), code16, range, out_cpu.data());
  emu::Launch(ctas, kThreads, dequantize_blockwise4<T, kBlock, kThreads>, packed.data(), code16, absmax,
              reinterpret_cast<T*>(out.data()), static_cast<long long>(n));
  EXPECT_EQ(FirstDiff(out.data(), out_cpu.data(), n * size), -1) << "dequantized";
}

// gemv4 with integer codes, absmax and inputs: every product and partial sum is exact, so the kernel's order of
// summation gives Gemv4Scalar's bits.
template <class T, int kThreads, int kRows>
void CheckGemv(int64_t N, int64_t K, int64_t blocksize, int64_t b_misalign) {
  constexpr DType dtype = DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat("gemv4 ", core::DTypeName(dtype), " threads ", kThreads, " rows ", kRows, " ", N, "x",
                            K, " blocksize ", blocksize, " B misaligned by ", b_misalign));
  const int64_t size = core::DTypeSize(dtype), bytes = core::PackedSize4(N * K);
  const int64_t blocks = (N * K + blocksize - 1) / blocksize;
  std::mt19937 rng(static_cast<unsigned>(N * 7 + K));
  Buffer A(K * size, 0), B(bytes, b_misalign), out(N * size, 0), out_cpu(N * size, 0);
  for (int64_t k = 0; k < K; ++k) core::StoreFromFloat(dtype, A.data(), k, static_cast<float>(rng() % 9) - 4.0f);
  for (int64_t i = 0; i < bytes; ++i) B.data()[i] = static_cast<unsigned char>(rng());
  Buffer absmax_bytes(blocks * 4);
  float* absmax = Floats(absmax_bytes);
  std::vector<float> code16(16);
  for (int64_t b = 0; b < blocks; ++b) absmax[b] = static_cast<float>(1 + rng() % 3);
  for (int c = 0; c < 16; ++c) code16[c] = static_cast<float>(c - 8);
  core::Gemv4Scalar(dtype, A.data(), B.data(), absmax, code16.data(), N, K, blocksize, out_cpu.data(), 0, N);
  int lg = 0;
  while ((int64_t{1} << lg) < blocksize) ++lg;
  const unsigned ctas = static_cast<unsigned>((N + kThreads / 32 * kRows - 1) / (kThreads / 32 * kRows));
  emu::Launch(ctas, kThreads, gemv4<T, kThreads, kRows>, reinterpret_cast<const T*>(A.data()), B.data(),
              absmax, code16.data(), reinterpret_cast<T*>(out.data()), static_cast<long long>(N),
              static_cast<long long>(K), lg);
  EXPECT_EQ(FirstDiff(out.data(), out_cpu.data(), N * size), -1) << "out";
}

template <class T>
void GemvShapes() {
  // K above the shared-memory tile of A (32 KB), the vector path, odd K and N * K (the element path), a block
  // larger than a row, B off its 16-byte alignment (the element path again).
  CheckGemv<T, 256, 2>(37, 16416, 64, 0);
  CheckGemv<T, 256, 2>(21, 4096, 128, 0);
  CheckGemv<T, 256, 2>(5, 33, 32, 0);
  CheckGemv<T, 256, 2>(4, 4103, 4096, 0);
  CheckGemv<T, 256, 2>(9, 4096, 64, 1);
  CheckGemv<T, 64, 1>(7, 2048, 64, 0);
  CheckGemv<T, 128, 4>(19, 1024, 256, 0);
}

// Lengths: a partial last block past the special values, and whole blocks.
template <class T, int kBlock, int kThreads>
void Lengths8() {
  Check8<T, kBlock, kThreads>(6 * kBlock + 37, 0, 2);
  Check8<T, kBlock, kThreads>(8 * kBlock, 0, 3);
  Check8<T, kBlock, kThreads>(6 * kBlock + 37, 1, 2);  // misaligned: the element path
}

template <class T, int kBlock, int kThreads>
void Lengths4() {
  for (core::Quant4 q : {core::Quant4::kNF4, core::Quant4::kFP4}) {
    Check4<T, kBlock, kThreads>(q, 6 * kBlock + 37, 0, 2);
    Check4<T, kBlock, kThreads>(q, 8 * kBlock, 0, 3);
    Check4<T, kBlock, kThreads>(q, 6 * kBlock + 38, 2, 2);  // misaligned by an even count: whole packed bytes
  }
}

TEST(Blockwise8Emulated, EqualsTheCpu) {
  Lengths8<float, 64, 256>();
  Lengths8<float, 256, 256>();
  Lengths8<float, 4096, 256>();
  Lengths8<half, 64, 256>();
  Lengths8<half, 4096, 256>();
  Lengths8<bf16, 32, 32>();
  Lengths8<bf16, 256, 256>();
  Lengths8<bf16, 4096, 256>();
  Lengths8<bf16, 1024, 1024>();
}

TEST(Blockwise4Emulated, EqualsTheCpu) {
  Lengths4<float, 64, 256>();
  Lengths4<float, 4096, 256>();
  Lengths4<half, 128, 256>();
  Lengths4<bf16, 32, 32>();
  Lengths4<bf16, 64, 256>();
  Lengths4<bf16, 4096, 256>();
}

TEST(Gemv4Emulated, IntegerProductsEqualTheDefinition) {
  GemvShapes<float>();
  GemvShapes<half>();
  GemvShapes<bf16>();
}

}  // namespace
}  // namespace bnb
