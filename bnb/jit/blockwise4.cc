#include "bnb/jit/blockwise4.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise8.h"
#include "bnb/jit/blockwise8.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/launch.h"
#include "bnb/jit/launch_shape.h"
#include "bnb/jit/threads_per_block.h"

namespace bnb::jit {
namespace {

// Elements per thread per quant block, as bw4::Shape<> in blockwise4.cuh computes it.
int64_t PerThread(int64_t blocksize, int threads, core::DType dtype) {
  const int64_t vec = 16 / core::DTypeSize(dtype);
  return std::max<int64_t>(blocksize / threads, 2 * vec);
}

int Log2(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

}  // namespace

absl::StatusOr<KernelSpec> Quantize4Spec(core::DType dtype, int64_t blocksize, core::Quant4 quant, int threads,
                                         const std::string& arch) {
  if (absl::Status st = core::CheckBlocksize(blocksize); !st.ok()) return st;
  threads = ThreadsPerBlock(threads);
  if (absl::Status st = CheckThreadsPerBlock("quantize_blockwise4", threads); !st.ok()) return st;
  KernelSpec s;
  s.template_name = "blockwise4";
  s.entry = "quantize_blockwise4";
  // QUANT: bnb::cb4::kNF4 = 0, kFP4 = 1 (codebook4.cuh).
  s.template_args = {{"T", CudaTypeName(dtype)},
                     {"BLOCKSIZE", absl::StrCat(blocksize)},
                     {"THREADS", absl::StrCat(threads)},
                     {"QUANT", quant == core::Quant4::kNF4 ? "0" : "1"}};
  s.arch = arch;
  return s;
}

absl::StatusOr<KernelSpec> Dequantize4Spec(core::DType dtype, int64_t blocksize, int threads,
                                           const std::string& arch) {
  if (absl::Status st = core::CheckBlocksize(blocksize); !st.ok()) return st;
  threads = ThreadsPerBlock(threads);
  if (absl::Status st = CheckThreadsPerBlock("dequantize_blockwise4", threads); !st.ok()) return st;
  KernelSpec s;
  s.template_name = "blockwise4";
  s.entry = "dequantize_blockwise4";
  s.template_args = {{"T", CudaTypeName(dtype)},
                     {"BLOCKSIZE", absl::StrCat(blocksize)},
                     {"THREADS", absl::StrCat(threads)}};
  s.arch = arch;
  return s;
}

absl::StatusOr<KernelSpec> Gemv4Spec(core::DType dtype, int threads, int rows, const std::string& arch) {
  if (threads == 0) threads = kDefaultGemv4Threads;
  if (rows == 0) rows = kDefaultGemv4Rows;
  if (absl::Status st = CheckThreadsPerBlock("gemv4", threads); !st.ok()) return st;
  if (rows < 1 || rows > 8) {
    return absl::InvalidArgumentError(absl::StrCat("gemv4 kernel: rows per warp must be in [1, 8], got ", rows));
  }
  KernelSpec s;
  s.template_name = "blockwise4";
  s.entry = "gemv4";
  s.template_args = {{"T", CudaTypeName(dtype)}, {"THREADS", absl::StrCat(threads)}, {"ROWS", absl::StrCat(rows)}};
  s.arch = arch;
  return s;
}

std::vector<KernelSpec> AllBlockwise4Specs(const std::string& arch, int threads) {
  std::vector<KernelSpec> out;
  constexpr core::DType kTypes[] = {core::DType::kFloat32, core::DType::kFloat16, core::DType::kBFloat16};
  for (core::Quant4 q : {core::Quant4::kNF4, core::Quant4::kFP4}) {
    for (core::DType t : kTypes) {
      for (int64_t bs = core::kMinBlocksize; bs <= core::kMaxBlocksize; bs *= 2) {
        out.push_back(*Quantize4Spec(t, bs, q, threads, arch));
      }
    }
  }
  for (core::DType t : kTypes) {
    for (int64_t bs = core::kMinBlocksize; bs <= core::kMaxBlocksize; bs *= 2) {
      out.push_back(*Dequantize4Spec(t, bs, threads, arch));
    }
  }
  for (core::DType t : kTypes) out.push_back(*Gemv4Spec(t, 0, 0, arch));
  return out;
}

BNB_REGISTER_KERNEL_FAMILY(blockwise4, AllBlockwise4Specs);

Dim3 Blockwise4Grid(int64_t n, int64_t blocksize, int threads, core::DType dtype, const DeviceInfo& device,
                    int ctas_per_sm) {
  threads = ThreadsPerBlock(threads);
  return BlockTileGrid(n, blocksize, threads, PerThread(blocksize, threads, dtype), device, ctas_per_sm);
}

absl::StatusOr<Dim3> Gemv4Grid(int64_t N, int threads, int rows) {
  if (threads == 0) threads = kDefaultGemv4Threads;
  if (rows == 0) rows = kDefaultGemv4Rows;
  const int64_t per_cta = int64_t{threads / 32} * rows;
  const int64_t ctas = (N + per_cta - 1) / per_cta;
  if (ctas > 0x7FFFFFFF) {
    return absl::InvalidArgumentError(absl::StrCat("gemv4: ", N, " rows need ", ctas,
                                                   " CTAs of ", per_cta, " rows, more than a grid holds"));
  }
  Dim3 g;
  g.x = static_cast<unsigned>(std::max<int64_t>(1, ctas));
  return g;
}

absl::Status LaunchQuantizeBlockwise4(KernelCache& cache, int device, core::DType dtype, core::Quant4 quant,
                                      const void* x, uint8_t* packed, float* absmax, int64_t n, int64_t blocksize,
                                      void* stream, int threads) {
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<KernelSpec> spec = Quantize4Spec(dtype, blocksize, quant, threads, "");
  if (!spec.ok()) return spec.status();
  threads = ThreadsPerBlock(threads);
  return LaunchOverBlockTiles(cache, device, *spec, n, blocksize, threads, PerThread(blocksize, threads, dtype),
                              stream, x, packed, absmax, static_cast<long long>(n));
}

absl::Status LaunchDequantizeBlockwise4(KernelCache& cache, int device, core::DType dtype, const uint8_t* packed,
                                        const float* code16, const float* absmax, void* out, int64_t n,
                                        int64_t blocksize, void* stream, int threads) {
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<KernelSpec> spec = Dequantize4Spec(dtype, blocksize, threads, "");
  if (!spec.ok()) return spec.status();
  threads = ThreadsPerBlock(threads);
  return LaunchOverBlockTiles(cache, device, *spec, n, blocksize, threads, PerThread(blocksize, threads, dtype),
                              stream, packed, code16, absmax, out, static_cast<long long>(n));
}

absl::Status LaunchGemv4(KernelCache& cache, int device, core::DType dtype, const void* A, const uint8_t* packed,
                         const float* absmax, const float* code16, void* out, int64_t N, int64_t K,
                         int64_t blocksize, void* stream, int threads, int rows) {
  if (N == 0) return absl::OkStatus();
  if (absl::Status st = core::CheckBlocksize(blocksize); !st.ok()) return st;
  if (N < 0 || K < 0) {
    return absl::InvalidArgumentError(absl::StrCat("gemv4: negative shape N=", N, " K=", K));
  }
  absl::StatusOr<KernelSpec> spec = Gemv4Spec(dtype, threads, rows, "");
  if (!spec.ok()) return spec.status();
  if (threads == 0) threads = kDefaultGemv4Threads;
  if (rows == 0) rows = kDefaultGemv4Rows;
  absl::StatusOr<Dim3> grid = Gemv4Grid(N, threads, rows);
  if (!grid.ok()) return grid.status();
  absl::StatusOr<LoadedKernel> k = cache.GetKernel(*spec, device);
  if (!k.ok()) return k.status();
  return Launch(*k, *grid, Dim3{static_cast<unsigned>(threads)}, 0, stream, A, packed, absmax, code16, out,
                static_cast<long long>(N), static_cast<long long>(K), Log2(blocksize));
}

}  // namespace bnb::jit
