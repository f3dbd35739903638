// Launch shapes shared by the blockwise kernels' host code.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_spec.h"
#include "bnb/jit/launcher.h"

namespace bnb::jit {

// OK for a power of two in [32, 1024]; otherwise an error naming `what` kernel and the value.
absl::Status CheckThreadsPerBlock(const char* what, int threads);

// Grid for n elements in quant blocks of `blocksize`, each thread taking `per_thread` elements of a block: one CTA
// per tile of threads * per_thread / blocksize quant blocks, at most as many CTAs as the device holds at once,
// `ctas_per_sm` on each multiprocessor (the kernels stride over the rest). A grid sized for more than fit runs
// as a full wave and a partial one, which leaves multiprocessors idle for its last stretch (ncu on the H100:
// 8-bit quantize, 5 CTAs resident per SM, grid sized for 8).
Dim3 BlockTileGrid(int64_t n, int64_t blocksize, int threads, int64_t per_thread, const DeviceInfo& device,
                   int ctas_per_sm);

// Gets `spec`'s kernel for `device` (compiling or loading it) and launches it with `threads` threads per CTA over
// BlockTileGrid on `stream`, passing `args`. The launch shared by the blockwise quantize / dequantize kernels.
absl::Status LaunchOverBlockTiles(KernelCache& cache, int device, const KernelSpec& spec, int64_t n,
                                  int64_t blocksize, int threads, int64_t per_thread, void* stream, void** args);

}  // namespace bnb::jit
