// pack_4bit and gemm_4bit_packed by ATen ops, for backends without kernels of their own (ops.h). The layout of
// bnb/core/gemm4_packed.h is a permutation: column 64g + 32h + 2p + e of tile t's row j goes to nibble h of byte
// 2j + e of run p of group g.
#include <limits>
#include <vector>

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

namespace {

// W's codes (N x K, one per uint8) from the layout's bytes: the permutation undone.
at::Tensor CodesOfLayout(const at::Tensor& codes, int64_t N, int64_t K) {
  const int64_t tiles = core::Packed4Tiles(N);
  const at::Tensor c = codes.reshape({tiles, K / core::kPackCols, 16, core::kPackRows, 2});  // t, g, p, j, e
  return at::stack({c.bitwise_and(15), c.bitwise_right_shift(4)}, -1)                     // h last
      .permute({0, 3, 1, 5, 2, 4})                                                        // t, j, g, h, p, e
      .reshape({tiles * core::kPackRows, K})
      .narrow(0, 0, N);
}

}  // namespace

at::Tensor UnpackByTensorOps(const at::Tensor& codes, int64_t N, int64_t K) {
  const at::Tensor u = CodesOfLayout(codes, N, K);
  return u.slice(1, 0, K, 2).bitwise_left_shift(4).bitwise_or(u.slice(1, 1, K, 2)).reshape({-1});
}

namespace {

// The int8-activation product by its definition (bnb/core/gemm4_packed.h) for W's codes u (N x K) and block scales s
// (N x K / blocksize). The groups' integer sums are exact in float32 in any order (each below 64 * 127^2 < 2^24);
// the groups are then added one by one, in order, as the definition rounds them.
at::Tensor Int8Product(const char* op, const at::Tensor& A, const at::Tensor& u, const at::Tensor& s,
                       const at::Tensor& code, int64_t N, int64_t K, int64_t blocksize,
                       const c10::optional<at::Tensor>& bias) {
  const std::array<int8_t, 16> values = Int8CodeValuesOf(op, code);
  const at::Tensor table = at::tensor(at::ArrayRef<int8_t>(values.data(), 16)).to(A.device()).to(at::kFloat);
  const int64_t M = A.numel() / K, groups = K / core::kPackCols;
  const at::Tensor a = A.reshape({M, groups, core::kPackCols}).to(at::kFloat);
  const at::Tensor finite = a.isfinite().all(-1, /*keepdim=*/true);
  const at::Tensor amax = at::where(finite, a.abs().amax(-1, /*keepdim=*/true),
                                    std::numeric_limits<float>::quiet_NaN());
  const at::Tensor sa = amax.div(127.0f), step = amax.div(127.0f * 127.0f);
  const at::Tensor q = at::where(finite.logical_and(sa.gt(0)), a.div(sa).clamp(-127, 127).round(), 0.0f);
  const at::Tensor w = table.index({u.to(at::kLong)}).view({N, groups, core::kPackCols});
  const at::Tensor dots = at::einsum("mgk,ngk->gmn", {q, w});                       // groups x M x N
  const at::Tensor scale = s.repeat_interleave(blocksize / core::kPackCols, 1);    // N x groups
  at::Tensor acc = at::zeros({M, N}, A.options().dtype(at::kFloat));
  for (int64_t g = 0; g < groups; ++g) {
    acc = acc.add(dots[g].mul(step.select(1, g).mul(scale.select(1, g).unsqueeze(0))));
  }
  if (bias.has_value()) acc = acc.add(bias->to(at::kFloat));
  std::vector<int64_t> shape(A.sizes().begin(), A.sizes().end());
  shape.back() = N;
  return acc.to(A.scalar_type()).view(shape);
}

}  // namespace

at::Tensor GemmPackedByTensorOps(const char* op, const at::Tensor& A, const at::Tensor& codes,
                                 const at::Tensor& scales, int64_t N, int64_t K, int64_t blocksize,
                                 const at::Tensor& code, const c10::optional<at::Tensor>& bias,
                                 bool int8_activations) {
  const int64_t tiles = core::Packed4Tiles(N), blocks = K / blocksize;
  const at::Tensor u = CodesOfLayout(codes, N, K);
  const at::Tensor s = scales.view({tiles, blocks, core::kPackRows})
                           .permute({0, 2, 1})
                           .reshape({tiles * core::kPackRows, blocks})
                           .narrow(0, 0, N);
  if (int8_activations) return Int8Product(op, A, u, s, code, N, K, blocksize, bias);
  const at::Tensor W = code.index({u.to(at::kLong)}).mul(s.repeat_interleave(blocksize, 1)).to(A.scalar_type());
  return at::linear(A, W, bias);
}

}  // namespace bnb::ops::blockwise4
