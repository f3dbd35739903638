// Nested statistics a band of rows at a time, for the 4-bit product kernels (gemv4_hwy.cc): each band's block
// scales expanded just before its rows run, so no full absmax array is made.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "bnb/core/gemv4.h"
#include "bnb/core/gemv4_x86.h"

namespace bnb::core {

// Each band starts on a row whose first element begins a block (a multiple of `step` rows), so that to the kernels
// it is a matrix of its own, its codes starting on a byte and its blocks at block 0 of the band's scales, which are
// expanded just before (about kBandBlocks of them: in L2 beside the rows' codes). run(m0, band's scales, first row,
// end row), rows counted from m0. avx512: expand by gemv4_x86::ExpandNested (the caller checked the CPU has it).
template <class Run>
void ForEachNestedBand(const NestedAbsmax& nested, int64_t N, int64_t K, int64_t blocksize, int64_t row_begin,
                       int64_t row_end, bool avx512, const Run& run) {
  constexpr int64_t kBandBlocks = 16384;
  const int64_t step = blocksize / std::gcd(K % blocksize, blocksize);  // m * K % blocksize == 0 iff step | m
  const int64_t band_rows = std::max<int64_t>(step, kBandBlocks * blocksize / K / step * step);
  thread_local std::vector<float> scales;  // kept between calls: no page faults for a fresh buffer each time
  for (int64_t m0 = row_begin / step * step; m0 < row_end; m0 += band_rows) {
    const int64_t m1 = std::min({m0 + band_rows, N, row_end});
    const int64_t b0 = m0 * K / blocksize;                    // exact: step | m0
    const int64_t b1 = (m1 * K + blocksize - 1) / blocksize;  // the blocks rows [m0, m1) touch
    scales.resize(b1 - b0);
    if (avx512) {
#if BNB_GEMV4_X86
      gemv4_x86::ExpandNested(nested.q, nested.code256, nested.absmax2, nested.offset, b0, b1, scales.data());
#endif
    } else {
      for (int64_t b = b0; b < b1; ++b) {
        const float scaled = nested.code256[nested.q[b]] * nested.absmax2[b / kNestedBlocksize];
        scales[b - b0] = scaled + nested.offset;
      }
    }
    run(m0, scales.data(), std::max(row_begin, m0) - m0, m1 - m0);
  }
}

}  // namespace bnb::core
