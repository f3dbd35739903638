// Bf16Codes: the shape of its tables, when a codebook or an absmax cannot use them, and concurrent first use.
#include "bnb/core/bf16_codes.h"

#include <cmath>
#include <thread>
#include <vector>

#include "bnb/core/blockwise4.h"
#include "bnb/core/blockwise8.h"
#include "bnb/core/codebook.h"
#include "bnb/core/dtype.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

PreparedCodebook Prepared(const std::vector<float>& code) { return *PrepareCodebook(code.data(), 256); }

// The table of an 8-bit codebook for absmax bits a.
const uint8_t* Table8(const PreparedCodebook& cb, uint16_t a) {
  return cb.bf16_codes->Table(a, [&](float amax, const float* x, int64_t n, uint8_t* codes) {
    QuantizeByAbsmax8(cb, amax, x, n, codes);
  });
}

TEST(Bf16Codes, DynamicMapRows) {
  const PreparedCodebook cb = Prepared(*CreateDynamicMap());
  ASSERT_NE(cb.bf16_codes, nullptr);
  // The smallest midpoint magnitude is 0.55e-6 / 2 = 2.75e-7; rows hold quotients below 2^(1 - d), and
  // 2^-22 < 2.75e-7 <= 2^-21: the last row is d = 23.
  EXPECT_EQ(cb.bf16_codes->rows(), 24);
}

TEST(Bf16Codes, IndexByHand) {
  // absmax 1.0 (0x3F80), 24 rows: the last row starts at 2^(0 - 23), magnitude bits 0x3F80 - 23 * 128 = 0x3400.
  // x = 0.5 (0x3F00): d = 1, so row 22, mantissa 0; positive at 2 * (22 * 128), negative one further.
  EXPECT_EQ(Bf16Codes::Index(0x3F80, 24, 0x3F00), 2 * (22 * 128));
  EXPECT_EQ(Bf16Codes::Index(0x3F80, 24, 0xBF00), 2 * (22 * 128) + 1);
  // x = absmax = 1.5 (0x3FC0): row 23, mantissa 0x40.
  EXPECT_EQ(Bf16Codes::Index(0x3FC0, 24, 0x3FC0), 2 * (23 * 128 + 0x40));
  EXPECT_EQ(Bf16Codes::Index(0x3FFF, 24, 0xBFFF), 2 * 24 * 128 - 1);  // the last position
  // Zero and far smaller values, of either sign, share position 0.
  EXPECT_EQ(Bf16Codes::Index(0x3F80, 24, 0x0000), 0);
  EXPECT_EQ(Bf16Codes::Index(0x3F80, 24, 0x8001), 0);
  EXPECT_EQ(Bf16Codes::Index(0x3F80, 24, 0xB3FF), 0);  // just below the last row
  EXPECT_EQ(Bf16Codes::Index(0x3F80, 24, 0xB400), 1);  // its first negative entry
}

TEST(Bf16Codes, TableHoldsTheCodesOfItsQuotients) {
  const PreparedCodebook cb = Prepared(*CreateDynamicMap());
  const uint16_t amax_bits = 0x3FA5;  // 1.2890625
  const uint8_t* table = Table8(cb, amax_bits);
  ASSERT_NE(table, nullptr);
  const float amax = BF16ToFloat(amax_bits);
  for (uint32_t h = 0; h <= amax_bits; h += 7) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const auto x = static_cast<uint16_t>(h | sign);
      EXPECT_EQ(table[Bf16Codes::Index(amax_bits, cb.bf16_codes->rows(), x)],
                NearestCode(cb, BF16ToFloat(x) / amax)) << std::hex << x;
    }
  }
}

TEST(Bf16Codes, BoundaryIgnoresMidpointsBetweenEqualCodes) {
  // FP4's -0 and +0 (codes 8 and 0) both code as 0: the midpoint between them, 0, changes nothing, and the
  // boundary is the midpoint between 0 and its smallest positive value 0.0625 / 12.
  const Codebook4& fp4 = GetCodebook4(Quant4::kFP4);
  EXPECT_EQ(Bf16Codes::SmallestCodeBoundary(fp4.midpoints.data(), fp4.sorted_to_code.data(), kCodebook4Size),
            (0.0f + 0.0625f / 12.0f) * 0.5f);
  const Codebook4& nf4 = GetCodebook4(Quant4::kNF4);
  EXPECT_EQ(Bf16Codes::SmallestCodeBoundary(nf4.midpoints.data(), nf4.sorted_to_code.data(), kCodebook4Size),
            nf4.midpoints[7]);  // between 0 (code 7) and 0.0796 (code 8)
}

TEST(Bf16Codes, DeclinesWhatItCannotServe) {
  // A midpoint at 0 (values +-1e-10, no 0): +0 and the smallest positive x code differently.
  std::vector<float> code(256);
  for (int i = 0; i < 256; ++i) code[i] = (i - 127.5f) / 128.0f;
  EXPECT_EQ(Prepared(code).bf16_codes, nullptr);
  // Absmax below 2^(rows - 1 - 127), or subnormal: the table's rows would not cover their quotients.
  const PreparedCodebook cb = Prepared(*CreateDynamicMap());
  const int rows = cb.bf16_codes->rows();
  EXPECT_EQ(Table8(cb, static_cast<uint16_t>((rows - 2) << 7 | 127)), nullptr);
  EXPECT_NE(Table8(cb, static_cast<uint16_t>((rows - 1) << 7)), nullptr);
  EXPECT_EQ(Table8(cb, 0x0040), nullptr);
}

TEST(Bf16Codes, ConcurrentFirstUseAgrees) {
  const PreparedCodebook cb = Prepared(*CreateDynamicMap());
  constexpr int kThreads = 4;
  std::vector<std::vector<const uint8_t*>> seen(kThreads, std::vector<const uint8_t*>(128));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int m = 0; m < 128; ++m) {
        const int mantissa = (m + 37 * t) % 128;
        seen[t][mantissa] = Table8(cb, static_cast<uint16_t>(0x3F80 | mantissa));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]);
  for (const uint8_t* p : seen[0]) EXPECT_NE(p, nullptr);
}

}  // namespace
}  // namespace bnb::core
