// The CUDA LLM.int8() passes (kernels/int8.cuh) run on the CPU by cuda_emu.h, against bnb/core's passes bit for
// bit, no GPU needed: row quantization with its outlier flags, column absmax over a 2-D grid of row chunks and the
// column codes, row dequantization, a gather of dequantized columns, the product's epilogue with and without a bias,
// and the small-batch product that multiplies and dequantizes in one pass; float32, float16 and bfloat16;
// thresholds 0 and 6; rows that are all zero, all outliers, hold NaN or +-inf; K off the thread count.
#include "bnb/tests/cuda_emu.h"
// The kernels as host C++ (after the emulator, which defines what they need).
#include "bnb/jit/int8_host.h"
#include "bnb/tests/cuda_emu_checks.h"

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bnb/core/dtype.h"
#include "bnb/core/int8.h"
#include "gtest/gtest.h"

namespace bnb {
namespace {

using core::DType;
using emu::DTypeOf;


// A kernel's buffer: `v`'s bytes in a guarded buffer (cuda_emu.h: a fault past its end), viewed as E by As and
// compared with the CPU's result by Same.
using Dev = std::unique_ptr<emu::GuardedBuffer>;
template <class E>
Dev OnDevice(const std::vector<E>& v) {
  auto b = std::make_unique<emu::GuardedBuffer>(v.size() * sizeof(E));
  if (!v.empty()) std::memcpy(b->data(), v.data(), v.size() * sizeof(E));
  return b;
}
template <class E>
E* As(const Dev& b) {
  return reinterpret_cast<E*>(b->data());
}
template <class E>
bool Same(const Dev& b, const std::vector<E>& want) {
  return b->size() == want.size() * sizeof(E) && std::memcmp(b->data(), want.data(), b->size()) == 0;
}

// rows x K values of dtype: normal * 3 (|x| >= 6 now and then), row 1 zero, row 2 a lone outlier, row 3 a NaN, row
// 4 +-inf.
std::vector<unsigned char> Input(DType dtype, int64_t rows, int64_t K, unsigned seed) {
  std::vector<unsigned char> x(rows * K * core::DTypeSize(dtype));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t i = 0; i < rows * K; ++i) {
    const int64_t r = i / K, k = i % K;
    float v = normal(rng);
    if (r == 1 || r == 2) v = 0.0f;
    if (r == 2 && k == K / 2) v = 50.0f;
    if (r == 3 && k == K / 3) v = NAN;
    if (r == 4 && k == 0) v = INFINITY;
    if (r == 4 && k == K - 1) v = -INFINITY;
    core::StoreFromFloat(dtype, x.data(), i, v);
  }
  return x;
}

template <class T>
void CheckQuantize(int64_t rows, int64_t K, float threshold) {
  constexpr DType dtype = DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat(core::DTypeName(dtype), " ", rows, "x", K, " threshold ", threshold));
  const std::vector<unsigned char> x = Input(dtype, rows, K, static_cast<unsigned>(rows * K));
  const Dev dx = OnDevice(x);
  const T* xt = As<const T>(dx);

  // Rows: codes, stats, outlier flags.
  std::vector<int8_t> codes_cpu(rows * K);
  std::vector<float> stats_cpu(rows);
  std::vector<uint8_t> flags_cpu(K, 0);
  const Dev codes = OnDevice(codes_cpu), stats = OnDevice(stats_cpu), flags = OnDevice(flags_cpu);
  core::Int8QuantizeRows(dtype, x.data(), K, threshold, 0, rows, codes_cpu.data(), stats_cpu.data());
  if (threshold > 0.0f) core::Int8OutlierColumns(dtype, x.data(), K, threshold, 0, rows, flags_cpu.data());
  emu::Launch(3u, 256, int8_quantize_rows<T, 256>, xt, static_cast<long long>(rows), static_cast<long long>(K),
              threshold, As<signed char>(codes), As<float>(stats),
              threshold > 0.0f ? As<unsigned char>(flags) : nullptr);  // no flags without a threshold, as the host
  EXPECT_TRUE(Same(codes, codes_cpu)) << "row codes";
  EXPECT_TRUE(Same(stats, stats_cpu)) << "row stats";
  EXPECT_TRUE(Same(flags, flags_cpu)) << "outlier flags";

  // Columns: absmax over chunks of rows (a 2-D grid, merged by atomicMax), then the codes.
  std::vector<float> col_cpu(K, 0.0f);
  const Dev col = OnDevice(col_cpu);
  core::Int8ColumnAbsmax(dtype, x.data(), K, threshold, 0, rows, col_cpu.data());
  const long long rows_per_cta = 3;
  const unsigned threads = 64;
  emu::Launch(emu::Dim3{static_cast<unsigned>((K + threads - 1) / threads),
                        static_cast<unsigned>((rows + rows_per_cta - 1) / rows_per_cta), 1},
              threads, int8_column_absmax<T, 64>, xt, static_cast<long long>(rows), static_cast<long long>(K),
              threshold, rows_per_cta, As<unsigned int>(col));
  EXPECT_TRUE(Same(col, col_cpu)) << "column absmax";
  std::vector<int8_t> ccodes_cpu(rows * K);
  const Dev ccodes = OnDevice(ccodes_cpu);
  core::Int8QuantizeColumns(dtype, x.data(), K, threshold, col_cpu.data(), 0, rows, ccodes_cpu.data());
  emu::Launch(2u, 64, int8_quantize_columns<T, 64>, xt, static_cast<long long>(rows * K), static_cast<long long>(K),
              threshold, As<const float>(col), As<signed char>(ccodes));
  EXPECT_TRUE(Same(ccodes, ccodes_cpu)) << "column codes";

  // Rows back to float32.
  std::vector<float> back_cpu(rows * K);
  const Dev back = OnDevice(back_cpu);
  core::Int8DequantizeRows(codes_cpu.data(), stats_cpu.data(), K, 0, rows, back_cpu.data());
  emu::Launch(2u, 128, int8_dequantize_rows<128>, As<const signed char>(codes), As<const float>(stats),
              static_cast<long long>(rows * K), static_cast<long long>(K), As<float>(back));
  EXPECT_TRUE(Same(back, back_cpu)) << "dequantized rows";
}

// One row under a threshold: every flag written (the buffer starts as garbage), and the codes with the outlier
// columns already zeroed, as the op's index_fill_ would leave them on more rows.
template <class T>
void CheckQuantizeOneRow(int64_t K) {
  constexpr DType dtype = DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat("one row ", core::DTypeName(dtype), " K ", K));
  std::vector<unsigned char> x(K * core::DTypeSize(dtype));
  std::mt19937 rng(static_cast<unsigned>(K));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t k = 0; k < K; ++k) core::StoreFromFloat(dtype, x.data(), k, normal(rng));
  core::StoreFromFloat(dtype, x.data(), K - 1, -40.0f);
  const float threshold = 6.0f;
  std::vector<int8_t> codes_cpu(K);
  std::vector<float> stats_cpu(1);
  std::vector<uint8_t> flags_cpu(K, 0);
  core::Int8QuantizeRows(dtype, x.data(), K, threshold, 0, 1, codes_cpu.data(), stats_cpu.data());
  core::Int8OutlierColumns(dtype, x.data(), K, threshold, 0, 1, flags_cpu.data());
  int outliers = 0;
  for (int64_t k = 0; k < K; ++k) {
    if (flags_cpu[k] != 0) codes_cpu[k] = 0, ++outliers;
  }
  ASSERT_GT(outliers, 1);
  const Dev dx = OnDevice(x), codes = OnDevice(std::vector<int8_t>(K)), stats = OnDevice(std::vector<float>(1));
  const Dev flags = OnDevice(std::vector<uint8_t>(K, 0xAB));
  emu::Launch(1u, 128, int8_quantize_rows<T, 128>, As<const T>(dx), 1LL, static_cast<long long>(K), threshold,
              As<signed char>(codes), As<float>(stats), As<unsigned char>(flags));
  EXPECT_TRUE(Same(codes, codes_cpu)) << "codes, outliers zeroed";
  EXPECT_TRUE(Same(stats, stats_cpu)) << "row stats";
  EXPECT_TRUE(Same(flags, flags_cpu)) << "every flag";
}

template <class T, class B>
void CheckEpilogue(int64_t rows, int64_t N, bool with_bias) {
  constexpr DType dtype = DTypeOf<T>(), bias_dtype = DTypeOf<B>();
  SCOPED_TRACE(absl::StrCat("epilogue ", core::DTypeName(dtype), " bias ",
                            with_bias ? core::DTypeName(bias_dtype) : "none", " ", rows, "x", N));
  std::mt19937 rng(static_cast<unsigned>(rows + N));
  std::vector<int32_t> A(rows * N);
  for (int32_t& a : A) a = static_cast<int32_t>(rng() % 2000001) - 1000000;
  std::vector<float> rs(rows), cs(N);
  for (float& r : rs) r = static_cast<float>(rng() % 1000) / 97.0f;
  for (float& c : cs) c = static_cast<float>(rng() % 1000) / 89.0f;
  cs[1] = INFINITY;
  std::vector<unsigned char> bias(N * core::DTypeSize(bias_dtype));
  for (int64_t i = 0; i < N; ++i) core::StoreFromFloat(bias_dtype, bias.data(), i, static_cast<float>(rng() % 100) / 7);
  std::vector<unsigned char> out_cpu(rows * N * core::DTypeSize(dtype));
  const Dev dA = OnDevice(A), drs = OnDevice(rs), dcs = OnDevice(cs), dbias = OnDevice(bias), out = OnDevice(out_cpu);
  core::Int8DequantizeProduct(A.data(), rs.data(), cs.data(), bias_dtype, with_bias ? bias.data() : nullptr, N, 0,
                              rows, dtype, out_cpu.data());
  emu::Launch(2u, 64, int8_dequantize_product<T, B, 64>, As<const int>(dA), As<const float>(drs),
              As<const float>(dcs), with_bias ? As<const B>(dbias) : nullptr, static_cast<long long>(rows * N),
              static_cast<long long>(N), As<T>(out));
  EXPECT_TRUE(Same(out, out_cpu)) << "dequantized product";
}

// int8_scaled_gemv<T, B, R, C> on M rows against an int32 product summed here and bnb/core's epilogue: codes
// that include -128 and 127 (the sums' extremes), a column scale of inf, N off the warp's C columns and K off the
// warp's 512-byte stride.
template <class T, class B, int R, int C>
void CheckGemv(int M, int64_t N, int64_t K, bool with_bias) {
  constexpr DType dtype = DTypeOf<T>(), bias_dtype = DTypeOf<B>();
  SCOPED_TRACE(absl::StrCat("gemv R=", R, " C=", C, " ", core::DTypeName(dtype), " bias ",
                            with_bias ? core::DTypeName(bias_dtype) : "none", " ", M, "x", K, " by ", N, "x", K));
  std::mt19937 rng(static_cast<unsigned>(M * 7 + N + K));
  std::vector<int8_t> A(M * K), W(N * K);
  for (int8_t& a : A) a = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  for (int8_t& w : W) w = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  for (int64_t k = 0; k < K; ++k) A[k] = W[k] = -128;  // row 0 by column 0: the largest sum
  if (N > 1) {
    for (int64_t k = 0; k < K; ++k) W[K + k] = 127;
  }
  std::vector<int32_t> product(M * N);
  for (int m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      int64_t sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += int64_t{A[m * K + k]} * W[n * K + k];
      product[m * N + n] = static_cast<int32_t>(sum);
    }
  }
  std::vector<float> rs(M), cs(N);
  for (float& r : rs) r = static_cast<float>(rng() % 1000) / 97.0f;
  for (float& c : cs) c = static_cast<float>(rng() % 1000) / 89.0f;
  if (N > 2) cs[2] = INFINITY;
  std::vector<unsigned char> bias(N * core::DTypeSize(bias_dtype));
  for (int64_t i = 0; i < N; ++i) core::StoreFromFloat(bias_dtype, bias.data(), i, static_cast<float>(rng() % 100) / 7);
  std::vector<unsigned char> out_cpu(M * N * core::DTypeSize(dtype));
  core::Int8DequantizeProduct(product.data(), rs.data(), cs.data(), bias_dtype, with_bias ? bias.data() : nullptr, N,
                              0, M, dtype, out_cpu.data());
  const Dev dA = OnDevice(A), dW = OnDevice(W), drs = OnDevice(rs), dcs = OnDevice(cs), dbias = OnDevice(bias);
  const Dev out = OnDevice(std::vector<unsigned char>(out_cpu.size(), 0xAB));
  constexpr unsigned threads = 64;
  const int64_t per_cta = threads / 32 * C;
  emu::Launch(static_cast<unsigned>((N + per_cta - 1) / per_cta), threads, int8_scaled_gemv<T, B, R, C, threads>,
              As<const signed char>(dA), As<const signed char>(dW), As<const float>(drs), As<const float>(dcs),
              with_bias ? As<const B>(dbias) : nullptr, M, static_cast<long long>(N), static_cast<long long>(K),
              As<T>(out));
  EXPECT_TRUE(Same(out, out_cpu)) << "gemv product";
}

// int8_dequantize_columns against bnb/core's gather: columns in any order and repeated, the first and last, a row
// scale of inf.
template <class T>
void CheckColumns(int64_t rows, int64_t K, std::vector<int64_t> cols) {
  constexpr DType dtype = DTypeOf<T>();
  SCOPED_TRACE(absl::StrCat("columns ", core::DTypeName(dtype), " ", rows, "x", K, ", ", cols.size(), " columns"));
  std::mt19937 rng(static_cast<unsigned>(rows + K));
  std::vector<int8_t> codes(rows * K);
  for (int8_t& c : codes) c = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  std::vector<float> stats(rows);
  for (float& v : stats) v = static_cast<float>(rng() % 1000) / 7.0f;
  stats[1] = INFINITY;
  const int64_t n = static_cast<int64_t>(cols.size());
  std::vector<unsigned char> out_cpu(rows * n * core::DTypeSize(dtype));
  core::Int8DequantizeColumns(codes.data(), K, stats.data(), cols.data(), n, 0, rows, dtype, out_cpu.data());
  const Dev dcodes = OnDevice(codes), dstats = OnDevice(stats), dcols = OnDevice(cols);
  const Dev out = OnDevice(std::vector<unsigned char>(out_cpu.size(), 0xAB));
  emu::Launch(2u, 64, int8_dequantize_columns<T, 64>, As<const signed char>(dcodes), static_cast<long long>(K),
              As<const float>(dstats), As<const long long>(dcols), static_cast<long long>(n),
              static_cast<long long>(rows * n), As<T>(out));
  EXPECT_TRUE(Same(out, out_cpu)) << "dequantized columns";
}

TEST(Int8Emulated, ColumnsEqualTheCpu) {
  CheckColumns<float>(70, 33, {0, 32, 5});
  CheckColumns<half>(9, 100, {99, 3, 3, 40});
  CheckColumns<bf16>(300, 64, {7});
}

TEST(Int8Emulated, GemvEqualsTheProductAndItsEpilogue) {
  CheckGemv<float, float, 1, 2>(1, 37, 528, false);
  CheckGemv<bf16, bf16, 1, 2>(1, 4, 16, true);
  CheckGemv<half, float, 1, 2>(1, 1, 1024, true);
  CheckGemv<bf16, float, 4, 4>(3, 9, 544, true);
  CheckGemv<float, half, 4, 4>(4, 16, 32, true);
  CheckGemv<half, half, 16, 4>(5, 13, 48, false);
  CheckGemv<bf16, bf16, 16, 4>(16, 10, 1040, true);
  CheckGemv<float, float, 16, 4>(16, 3, 0, true);  // K = 0: the bias alone
}

TEST(Int8Emulated, QuantizePassesEqualTheCpu) {
  for (float threshold : {0.0f, 6.0f}) {
    CheckQuantize<float>(7, 300, threshold);
    CheckQuantize<half>(9, 64, threshold);
    CheckQuantize<bf16>(6, 1000, threshold);
  }
  CheckQuantizeOneRow<float>(300);
  CheckQuantizeOneRow<half>(64);
  CheckQuantizeOneRow<bf16>(4096);
}

TEST(Int8Emulated, ProductEpilogueEqualsTheCpu) {
  CheckEpilogue<float, float>(5, 70, false);
  CheckEpilogue<half, half>(5, 70, true);
  CheckEpilogue<bf16, float>(3, 129, true);
  CheckEpilogue<float, bf16>(4, 33, true);
}

}  // namespace
}  // namespace bnb
