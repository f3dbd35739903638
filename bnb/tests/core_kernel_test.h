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

// Parameterized by an instruction set of core::AvailableIsas(): the dispatch is capped to it for the test.
class EveryIsa : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ASSERT_TRUE(core::SetIsaCap(GetParam()).ok()); }
  void TearDown() override { ASSERT_TRUE(core::SetIsaCap("best").ok()); }
};

}  // namespace bnb::tests
