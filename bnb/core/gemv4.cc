// The scalar definition of the 4-bit matrix-vector product, what every kernel of it shares, and the nested-
// statistics driver over them.
#include "bnb/core/gemv4.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "bnb/core/blockwise4.h"

namespace bnb::core {

bool RowHasNonFiniteAbsmax(const float* absmax, int64_t m, int64_t K, int block_shift) {
  for (int64_t b = (m * K) >> block_shift; b <= ((m + 1) * K - 1) >> block_shift; ++b) {
    if (!std::isfinite(absmax[b])) return true;
  }
  return false;
}

void Gemv4Scalar(DType dtype, const void* A, const uint8_t* B, const float* absmax, const float* code16, int64_t N,
                 int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end) {
  (void)N;
  for (int64_t m = row_begin; m < row_end; ++m) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t f = m * K + k;
      const float w = code16[PackedCode4(B, f)] * absmax[f / blocksize];
      const float p = LoadAsFloat(dtype, A, k) * w;
      acc = acc + p;
    }
    StoreFromFloat(dtype, out, m, acc);
  }
}

// Bands start on rows whose first element begins a block (a multiple of `step` rows), so that each band is a
// matrix of its own to Gemv4: its codes start on a byte and its blocks at the band's block 0.
void Gemv4Nested(DType dtype, const void* A, const uint8_t* B, const NestedAbsmax& absmax, const float* code16,
                 int64_t N, int64_t K, int64_t blocksize, void* out, int64_t row_begin, int64_t row_end,
                 bool bf16_products) {
  if (row_begin >= row_end) return;
  // Rows per band: a multiple of `step`, about kBandBlocks blocks (16 KB of absmax, in L1 beside the rows' codes).
  constexpr int64_t kBandBlocks = 4096;
  const int64_t step = blocksize / std::gcd(K % blocksize, blocksize);  // m * K % blocksize == 0 iff step | m
  const int64_t band_rows = std::max<int64_t>(step, kBandBlocks * blocksize / K / step * step);
  const int64_t out_size = DTypeSize(dtype);
  std::vector<float> scales;
  for (int64_t m0 = row_begin / step * step; m0 < row_end; m0 += band_rows) {
    const int64_t m1 = std::min({m0 + band_rows, N, row_end});
    const int64_t b0 = m0 * K / blocksize;                    // exact: step | m0
    const int64_t b1 = (m1 * K + blocksize - 1) / blocksize;  // the blocks rows [m0, m1) touch
    scales.resize(b1 - b0);
    for (int64_t b = b0; b < b1; ++b) {
      const float scaled = absmax.code256[absmax.q[b]] * absmax.absmax2[b / kNestedBlocksize];
      scales[b - b0] = scaled + absmax.offset;
    }
    // m0 * K / 2 is exact too: blocksize is even, so m0 * K is.
    Gemv4(dtype, A, B + m0 * K / 2, scales.data(), code16, m1 - m0, K, blocksize,
          static_cast<char*>(out) + m0 * out_size, std::max(row_begin, m0) - m0, m1 - m0, bf16_products);
  }
}

}  // namespace bnb::core
