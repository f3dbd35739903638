// The vectorized LLM.int8() passes equal their scalar definitions bit for bit on every instruction set, and the
// definitions give the hand-computed codes.
#include "bnb/core/int8.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bnb/tests/core_kernel_test.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

using tests::Encode;
using tests::EveryIsa;

// rows x K values: randn * 3 with outliers (|x| >= 6 now and then), a zero row, a row of one outlier, NaN and +-inf
// rows, subnormals.
std::vector<float> Data(int64_t rows, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(rows * K);
  for (float& x : v) x = normal(rng);
  if (rows > 4) {
    for (int64_t k = 0; k < K; ++k) v[1 * K + k] = 0.0f;  // all zero
    for (int64_t k = 0; k < K; ++k) v[2 * K + k] = k == 0 ? 50.0f : 0.0f;  // its only nonzero is an outlier
    v[3 * K + K / 2] = NAN;
    v[4 * K] = INFINITY;
    v[4 * K + K - 1] = -INFINITY;
  }
  if (rows > 5) v[5 * K] = std::ldexp(1.0f, -140);
  return v;
}

TEST_P(EveryIsa, Int8PassesEqualScalar) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const auto& [rows, K] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {9, 16}, {7, 33}, {12, 300}}) {
      for (float t : {0.0f, 6.0f, 0.5f}) {
        SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " " << rows << "x" << K << " threshold " << t);
        const std::vector<uint8_t> x = Encode(dtype, Data(rows, K, static_cast<uint32_t>(rows * K)));
        std::vector<int8_t> codes(rows * K), codes_ref(rows * K);
        std::vector<float> stats(rows), stats_ref(rows);
        Int8QuantizeRows(dtype, x.data(), K, t, 0, rows, codes.data(), stats.data());
        int8_scalar::QuantizeRows(dtype, x.data(), K, t, 0, rows, codes_ref.data(), stats_ref.data());
        EXPECT_EQ(codes, codes_ref);
        EXPECT_EQ(std::memcmp(stats.data(), stats_ref.data(), rows * sizeof(float)), 0);

        std::vector<uint8_t> flags(K, 0), flags_ref(K, 0);
        Int8OutlierColumns(dtype, x.data(), K, t, 0, rows, flags.data());
        if (t > 0.0f) int8_scalar::OutlierColumns(dtype, x.data(), K, t, 0, rows, flags_ref.data());
        EXPECT_EQ(flags, flags_ref);

        std::vector<float> cols(K, 0.0f), cols_ref(K, 0.0f);
        Int8ColumnAbsmax(dtype, x.data(), K, t, 0, rows, cols.data());
        int8_scalar::ColumnAbsmax(dtype, x.data(), K, t, 0, rows, cols_ref.data());
        EXPECT_EQ(std::memcmp(cols.data(), cols_ref.data(), K * sizeof(float)), 0);
        Int8QuantizeColumns(dtype, x.data(), K, t, cols_ref.data(), 0, rows, codes.data());
        int8_scalar::QuantizeColumns(dtype, x.data(), K, t, cols_ref.data(), 0, rows, codes_ref.data());
        EXPECT_EQ(codes, codes_ref);

        std::vector<float> out(rows * K), out_ref(rows * K);
        Int8DequantizeRows(codes_ref.data(), stats_ref.data(), K, 0, rows, out.data());
        int8_scalar::DequantizeRows(codes_ref.data(), stats_ref.data(), K, 0, rows, out_ref.data());
        EXPECT_EQ(std::memcmp(out.data(), out_ref.data(), rows * K * sizeof(float)), 0);
      }
    }
  }
}

TEST_P(EveryIsa, Int8DequantizeProductEqualsScalar) {
  std::mt19937 rng(3);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const auto& [rows, N] : {std::pair<int64_t, int64_t>{1, 1}, {5, 17}, {3, 64}}) {
      std::vector<int32_t> A(rows * N);
      for (int32_t& a : A) a = static_cast<int32_t>(rng() % 4000001) - 2000000;
      A[0] = (1 << 30) + 3;  // above 2^24: rounded on its way to float
      std::vector<float> rs(rows), cs(N), bias(N);
      for (float& v : rs) v = static_cast<float>(rng() % 1000) / 97.0f;
      for (float& v : cs) v = static_cast<float>(rng() % 1000) / 89.0f;
      for (float& v : bias) v = static_cast<float>(static_cast<int>(rng() % 1000) - 500) / 7.0f;
      cs[0] = INFINITY;
      for (DType bias_dtype : {DType::kFloat32, DType::kBFloat16}) {
        const std::vector<uint8_t> b = Encode(bias_dtype, bias);
        for (const void* bp : {static_cast<const void*>(nullptr), static_cast<const void*>(b.data())}) {
          std::vector<uint8_t> out(rows * N * DTypeSize(dtype)), out_ref(out.size());
          Int8DequantizeProduct(A.data(), rs.data(), cs.data(), bias_dtype, bp, N, 0, rows, dtype, out.data());
          int8_scalar::DequantizeProduct(A.data(), rs.data(), cs.data(), bias_dtype, bp, N, 0, rows, dtype,
                                         out_ref.data());
          tests::ExpectSameBits(dtype, out, out_ref, rows * N);
        }
      }
    }
  }
}

TEST(Int8DequantizeColumns, EqualsDequantizedRowsOfTheGatheredColumns) {
  std::mt19937 rng(5);
  const int64_t rows = 7, K = 50;
  std::vector<int8_t> codes(rows * K);
  for (int8_t& c : codes) c = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> stats(rows);
  for (float& s : stats) s = static_cast<float>(rng() % 100000) / 997.0f;
  stats[2] = INFINITY;
  stats[3] = NAN;
  const std::vector<int64_t> cols = {0, 3, 3, 49, 17};
  const int64_t n = static_cast<int64_t>(cols.size());
  std::vector<int8_t> gathered(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) gathered[r * n + j] = codes[r * K + cols[j]];
  }
  std::vector<float> want(rows * n);
  int8_scalar::DequantizeRows(gathered.data(), stats.data(), n, 0, rows, want.data());
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    std::vector<uint8_t> got(rows * n * DTypeSize(dtype));
    Int8DequantizeColumns(codes.data(), K, stats.data(), cols.data(), n, 2, rows, dtype, got.data());
    Int8DequantizeColumns(codes.data(), K, stats.data(), cols.data(), n, 0, 2, dtype, got.data());
    tests::ExpectSameBits(dtype, got, Encode(dtype, want), rows * n);
  }
}

INSTANTIATE_TEST_SUITE_P(Int8, EveryIsa, ::testing::ValuesIn(AvailableIsas()),
                         [](const auto& info) { return info.param; });

// By hand: absmax 127 (scale 1), codes = the values rounded half to even; outliers (|x| >= 6, threshold 6) are out
// of the absmax and their columns report as outliers.
TEST(Int8Definition, HandComputedCodes) {
  const std::vector<float> x = {127.0f, 2.5f, -3.5f, 0.5f,   // absmax 127: codes 127, 2, -4, 0
                                1.0f,   -2.0f, 8.0f, 0.0f};  // threshold 6: 8 is an outlier, absmax 2
  std::vector<int8_t> codes(8);
  std::vector<float> stats(2);
  int8_scalar::QuantizeRows(DType::kFloat32, x.data(), 4, 0.0f, 0, 2, codes.data(), stats.data());
  EXPECT_EQ(std::vector<int8_t>(codes.begin(), codes.begin() + 4), (std::vector<int8_t>{127, 2, -4, 0}));
  EXPECT_EQ(stats[0], 127.0f);
  EXPECT_EQ(stats[1], 8.0f);
  int8_scalar::QuantizeRows(DType::kFloat32, x.data() + 4, 4, 6.0f, 0, 1, codes.data(), stats.data());
  EXPECT_EQ(stats[0], 2.0f);
  EXPECT_EQ(codes[0], 64);   // 1 * 63.5 = 63.5: half to even
  EXPECT_EQ(codes[1], -127);
  std::vector<uint8_t> flags(4, 0);
  int8_scalar::OutlierColumns(DType::kFloat32, x.data(), 4, 6.0f, 0, 2, flags.data());
  EXPECT_EQ(flags, (std::vector<uint8_t>{1, 0, 1, 0}));  // 127 and 8
}

}  // namespace
}  // namespace bnb::core
