#include "bnb/jit/blockwise8.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bnb/core/blockwise8.h"
#include "bnb/jit/kernel_registry.h"
#include "bnb/jit/launch.h"
#include "bnb/jit/launch_shape.h"
#include "bnb/jit/threads_per_block.h"

namespace bnb::jit {
namespace {

// Elements per thread per quant block, as Shape<> in blockwise8.cuh computes it.
int64_t PerThread(int64_t blocksize, int threads, core::DType dtype) {
  const int64_t vec = 16 / core::DTypeSize(dtype);
  return std::max<int64_t>(blocksize / threads, vec);
}

}  // namespace

const char* CudaTypeName(core::DType dtype) {
  switch (dtype) {
    case core::DType::kFloat32: return "float";
    case core::DType::kFloat16: return "bnb::half";
    case core::DType::kBFloat16: return "bnb::bf16";
  }
  return "?";
}

absl::StatusOr<KernelSpec> Blockwise8Spec(bool quantize, core::DType dtype, int64_t blocksize, int threads,
                                          const std::string& arch) {
  if (absl::Status st = core::CheckBlocksize(blocksize); !st.ok()) return st;
  threads = ThreadsPerBlock(threads);
  if (absl::Status st = CheckThreadsPerBlock("blockwise8", threads); !st.ok()) return st;
  KernelSpec s;
  s.template_name = "blockwise8";
  s.entry = quantize ? "quantize_blockwise8" : "dequantize_blockwise8";
  s.template_args = {{"T", CudaTypeName(dtype)},
                     {"BLOCKSIZE", absl::StrCat(blocksize)},
                     {"THREADS", absl::StrCat(threads)}};
  s.arch = arch;
  return s;
}

KernelSpec PrepareCodebook8Spec(const std::string& arch) {
  KernelSpec s;
  s.template_name = "blockwise8";
  s.entry = "prepare_codebook8";
  s.template_args = {{"THREADS", absl::StrCat(kPrepareCodebook8Threads)}};
  s.arch = arch;
  return s;
}

std::vector<KernelSpec> AllBlockwise8Specs(const std::string& arch, int threads) {
  std::vector<KernelSpec> out = {PrepareCodebook8Spec(arch)};
  for (bool q : {true, false}) {
    for (core::DType t : {core::DType::kFloat32, core::DType::kFloat16, core::DType::kBFloat16}) {
      for (int64_t bs = core::kMinBlocksize; bs <= core::kMaxBlocksize; bs *= 2) {
        out.push_back(*Blockwise8Spec(q, t, bs, threads, arch));
      }
    }
  }
  return out;
}

BNB_REGISTER_KERNEL_FAMILY(blockwise8, AllBlockwise8Specs);

Dim3 Blockwise8Grid(int64_t n, int64_t blocksize, int threads, core::DType dtype, const DeviceInfo& device,
                    int ctas_per_sm) {
  threads = ThreadsPerBlock(threads);
  return BlockTileGrid(n, blocksize, threads, PerThread(blocksize, threads, dtype), device, ctas_per_sm);
}

absl::Status LaunchQuantizeBlockwise8(KernelCache& cache, int device, core::DType dtype, const void* x,
                                      const float* code, uint8_t* codes, float* absmax, void* scratch, int64_t n,
                                      int64_t blocksize, void* stream, int threads) {
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<KernelSpec> spec = Blockwise8Spec(true, dtype, blocksize, threads, "");
  if (!spec.ok()) return spec.status();
  threads = ThreadsPerBlock(threads);
  absl::StatusOr<LoadedKernel> prepare = cache.GetKernel(PrepareCodebook8Spec(""), device);
  if (!prepare.ok()) return prepare.status();
  if (absl::Status st = Launch(*prepare, Dim3{1}, Dim3{kPrepareCodebook8Threads}, 0, stream, code, scratch);
      !st.ok()) {
    return st;
  }
  return LaunchOverBlockTiles(cache, device, *spec, n, blocksize, threads, PerThread(blocksize, threads, dtype),
                              stream, x, scratch, codes, absmax, static_cast<long long>(n));
}

absl::Status LaunchDequantizeBlockwise8(KernelCache& cache, int device, core::DType dtype, const uint8_t* codes,
                                        const float* code, const float* absmax, void* out, int64_t n,
                                        int64_t blocksize, void* stream, int threads) {
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<KernelSpec> spec = Blockwise8Spec(false, dtype, blocksize, threads, "");
  if (!spec.ok()) return spec.status();
  threads = ThreadsPerBlock(threads);
  return LaunchOverBlockTiles(cache, device, *spec, n, blocksize, threads, PerThread(blocksize, threads, dtype),
                              stream, codes, code, absmax, out, static_cast<long long>(n));
}

}  // namespace bnb::jit
