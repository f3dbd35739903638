// pack_4bit and gemm_4bit_packed by ATen ops, for backends without kernels of their own (ops.h). The layout of
// bnb/core/gemm4_packed.h is a permutation: column 64g + 32h + 2p + e of tile t's row j goes to nibble h of byte
// 2j + e of run p of group g.
#include "bnb/ops/blockwise4/ops.h"

namespace bnb::ops::blockwise4 {

namespace {

// The codes of W (N x K, one per uint8) from bitsandbytes' packing: byte i holds column 2i high, 2i + 1 low.
at::Tensor Codes(const at::Tensor& packed, int64_t N, int64_t K) {
  return at::stack({packed.bitwise_right_shift(4), packed.bitwise_and(15)}, -1).view({N, K});
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> PackByTensorOps(const at::Tensor& packed, int64_t N, int64_t K,
                                                   const at::Tensor& absmax, int64_t blocksize) {
  const int64_t tiles = core::Packed4Tiles(N), pad = tiles * core::kPackRows - N, blocks = K / blocksize;
  const at::Tensor u = at::constant_pad_nd(Codes(packed, N, K), {0, 0, 0, pad})
                           .view({tiles, core::kPackRows, K / core::kPackCols, 2, 16, 2})  // t, j, g, h, p, e
                           .permute({0, 2, 4, 1, 5, 3});                                   // t, g, p, j, e, h
  const at::Tensor codes =
      u.select(-1, 0).bitwise_or(u.select(-1, 1).bitwise_left_shift(4)).contiguous().view({-1});
  const at::Tensor scales = at::constant_pad_nd(absmax.reshape({N, blocks}), {0, 0, 0, pad})
                                .view({tiles, core::kPackRows, blocks})
                                .permute({0, 2, 1})
                                .contiguous()
                                .view({-1});
  return {codes, scales};
}

at::Tensor GemmPackedByTensorOps(const at::Tensor& A, const at::Tensor& codes, const at::Tensor& scales, int64_t N,
                                 int64_t K, int64_t blocksize, const at::Tensor& code,
                                 const c10::optional<at::Tensor>& bias) {
  const int64_t tiles = core::Packed4Tiles(N), blocks = K / blocksize;
  const at::Tensor c = codes.view({tiles, K / core::kPackCols, 16, core::kPackRows, 2});  // t, g, p, j, e
  const at::Tensor u = at::stack({c.bitwise_and(15), c.bitwise_right_shift(4)}, -1)     // h last
                           .permute({0, 3, 1, 5, 2, 4})                                 // t, j, g, h, p, e
                           .reshape({tiles * core::kPackRows, K})
                           .narrow(0, 0, N);
  const at::Tensor s = scales.view({tiles, blocks, core::kPackRows})
                           .permute({0, 2, 1})
                           .reshape({tiles * core::kPackRows, blocks})
                           .narrow(0, 0, N)
                           .repeat_interleave(blocksize, 1);
  const at::Tensor W = code.index({u.to(at::kLong)}).mul(s).to(A.scalar_type());
  return at::linear(A, W, bias);
}

}  // namespace bnb::ops::blockwise4
