// Launch shapes shared by the blockwise kernels' host code.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bnb/jit/kernel_cache.h"
#include "bnb/jit/kernel_spec.h"
#include "bnb/jit/launch.h"
#include "bnb/jit/runtime.h"

namespace bnb::jit {

// CTAs of `threads` for n elements, a thread each, for kernels that stride over the rest: enough to fill any GPU.
Dim3 ElementGrid(int64_t n, int threads);

// Grid for n elements in quant blocks of `blocksize`, each thread taking `per_thread` elements of a block: one CTA
// per tile of threads * per_thread / blocksize quant blocks, at most as many CTAs as the device holds at once,
// `ctas_per_sm` on each multiprocessor (the kernels stride over the rest). A grid sized for more than fit runs
// as a full wave and a partial one, which leaves multiprocessors idle for its last stretch.
Dim3 BlockTileGrid(int64_t n, int64_t blocksize, int threads, int64_t per_thread, const DeviceInfo& device,
                   int ctas_per_sm);

// A blockwise kernel ready to launch over BlockTileGrid: `spec`'s kernel for the device (compiled or loaded), its
// grid by the kernel's own occupancy, and its block of `threads`.
struct BlockTileLaunch {
  LoadedKernel kernel;
  Dim3 grid, block;
};
absl::StatusOr<BlockTileLaunch> PlanBlockTileLaunch(KernelCache& cache, int device, const KernelSpec& spec,
                                                    int64_t n, int64_t blocksize, int threads, int64_t per_thread);

// PlanBlockTileLaunch, then Launch with `args` on `stream`: the launch of the blockwise quantize / dequantize
// kernels.
template <class... Args>
absl::Status LaunchOverBlockTiles(KernelCache& cache, int device, const KernelSpec& spec, int64_t n,
                                  int64_t blocksize, int threads, int64_t per_thread, void* stream,
                                  const Args&... args) {
  absl::StatusOr<BlockTileLaunch> plan = PlanBlockTileLaunch(cache, device, spec, n, blocksize, threads, per_thread);
  if (!plan.ok()) return plan.status();
  return Launch(plan->kernel, plan->grid, plan->block, 0, stream, args...);
}

}  // namespace bnb::jit
