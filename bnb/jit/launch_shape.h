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
// per tile of threads * per_thread / blocksize quant blocks, at most as many CTAs as fit on the device at once
// (the kernels stride over the rest).
Dim3 BlockTileGrid(int64_t n, int64_t blocksize, int threads, int64_t per_thread, const DeviceInfo& device);

// Gets `spec`'s kernel for `device` (compiling or loading it) and launches it with `threads` threads per CTA over
// BlockTileGrid on `stream`, passing `args`. The launch shared by the blockwise quantize / dequantize kernels.
absl::Status LaunchOverBlockTiles(KernelCache& cache, int device, const KernelSpec& spec, int64_t n,
                                  int64_t blocksize, int threads, int64_t per_thread, void* stream, void** args);

}  // namespace bnb::jit
