// Helpers shared by the core kernel tests (blockwise 8- and 4-bit, gemv): element encoding, the block of special
// values, absmax values for dequantize, 64-byte aligned outputs, exact comparison of outputs, the tolerance of a
// gemv output, and the fixture that runs a test once per compiled instruction set.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bnb/core/cpu_isa.h"
#include "bnb/core/dtype.h"
#include "gtest/gtest.h"

namespace bnb::tests {

// Raw element bits for `dtype`, from float values.
inline std::vector<uint8_t> Encode(core::DType dtype, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * core::DTypeSize(dtype));
  for (size_t i = 0; i < v.size(); ++i) core::StoreFromFloat(dtype, out.data(), i, v[i]);
  return out;
}

// Puts, into data of more than 600 values, a zero block (for blocksizes 32 and 64), NaN, +-inf and subnormals.
inline void AddSpecialValues(std::vector<float>& v) {
  for (int i = 0; i < 64; ++i) v[i] = 0.0f;
  v[300] = NAN;
  v[450] = INFINITY;
  v[451] = -INFINITY;
  for (int i = 520; i < 580; ++i) v[i] = std::ldexp(1.0f, -140) * i;  // subnormals
}

// The first n elements of a and b, of `dtype`, equal bit for bit (any NaN equals any NaN).
inline void ExpectSameBits(core::DType dtype, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = core::LoadAsFloat(dtype, a.data(), i), y = core::LoadAsFloat(dtype, b.data(), i);
    if (std::isnan(x) && std::isnan(y)) continue;
    ASSERT_EQ(core::FloatToBits(x), core::FloatToBits(y)) << "element " << i;
  }
}

// Absmax values for `blocks` blocks to dequantize with: random finite ones, NaN at block 3 and +inf at block 5.
inline std::vector<float> TestAbsmax(int64_t blocks, std::mt19937& rng) {
  std::vector<float> absmax(blocks);
  for (auto& a : absmax) a = static_cast<float>(rng() % 1000) / 7.0f;
  absmax[3] = NAN;
  absmax[5] = INFINITY;
  return absmax;
}

// `bytes` of output starting on a 64-byte boundary, as the kernels' streaming stores want.
class Aligned64 {
 public:
  explicit Aligned64(size_t bytes) : buf_(bytes + 64) {
    data_ = buf_.data() + (64 - reinterpret_cast<uintptr_t>(buf_.data()) % 64) % 64;
  }
  uint8_t* data() { return data_; }

 private:
  std::vector<uint8_t> buf_;
  uint8_t* data_;
};

// How far a gemv output of `dtype` may lie from its float64 reference `ref`, the sum of products whose magnitudes
// add up to `magnitude`: float32 summation error, plus the output's rounding to dtype.
inline double GemvTolerance(core::DType dtype, double ref, double magnitude) {
  double rounding = 0.0;  // relative rounding step of the output
  switch (dtype) {
    case core::DType::kFloat32: rounding = 0.0; break;
    case core::DType::kFloat16: rounding = std::ldexp(1.0, -11); break;
    case core::DType::kBFloat16: rounding = std::ldexp(1.0, -8); break;
  }
  return 1e-5 * magnitude + rounding * std::fabs(ref) + 1e-30;
}

// Absmax bit patterns for exhaustive bfloat16 tests of a Bf16Codes table with `rows` rows: mantissas 0, 1, 64 and
// 127 at exponents from below the table's smallest (those blocks take the search) up to the largest finite, and
// two subnormals.
inline std::vector<uint16_t> Bf16AbsmaxCases(int rows) {
  std::vector<uint16_t> amaxes = {0x0001, 0x007F};
  for (int e : {rows - 2, rows - 1, rows, 100, 127, 200, 254}) {
    for (int m : {0, 1, 64, 127}) amaxes.push_back(static_cast<uint16_t>(e << 7 | m));
  }
  return amaxes;
}

// Every 16-bit float (bfloat16 or float16 bits: both order magnitudes as their bits do) up to absmax bits a, both
// signs (zeros and subnormals included), in blocks of `bs` that each start with a, so that every block's absmax is a.
inline std::vector<uint16_t> Every16BitUpTo(uint16_t a, int64_t bs) {
  std::vector<uint16_t> x;
  for (uint32_t h = 0; h <= a; ++h) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      if (static_cast<int64_t>(x.size()) % bs == 0) x.push_back(a);
      x.push_back(static_cast<uint16_t>(h | sign));
    }
  }
  return x;
}

// Parameterized by an instruction set of core::AvailableIsas(): the dispatch is capped to it for the test.
class EveryIsa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_TRUE(core::SetIsaCap(GetParam()).ok()); }
  void TearDown() override { ASSERT_TRUE(core::SetIsaCap("best").ok()); }
};

}  // namespace bnb::tests
