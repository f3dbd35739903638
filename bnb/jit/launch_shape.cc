#include "bnb/jit/launch_shape.h"

#include <algorithm>

#include "bnb/core/blockwise8.h"

namespace bnb::jit {

Dim3 ElementGrid(int64_t n, int threads) {
  return Dim3{static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t{1} << 16))};
}

Dim3 BlockTileGrid(int64_t n, int64_t blocksize, int threads, int64_t per_thread, const DeviceInfo& device,
                   int ctas_per_sm) {
  const int64_t per_block_threads = blocksize / per_thread;
  const int64_t blocks_per_tile = threads / per_block_threads;
  const int64_t tiles = (core::NumBlocks(n, blocksize) + blocks_per_tile - 1) / blocks_per_tile;
  const int64_t resident = int64_t{std::max(device.multiprocessors, 1)} * std::max(ctas_per_sm, 1);
  Dim3 g;
  g.x = static_cast<unsigned>(std::max<int64_t>(1, std::min(tiles, resident)));
  return g;
}

absl::StatusOr<BlockTileLaunch> PlanBlockTileLaunch(KernelCache& cache, int device, const KernelSpec& spec,
                                                    int64_t n, int64_t blocksize, int threads, int64_t per_thread) {
  absl::StatusOr<DeviceInfo> info = cache.runtime().GetDeviceInfo(device);
  if (!info.ok()) return info.status();
  absl::StatusOr<LoadedKernel> k = cache.GetKernel(spec, device);
  if (!k.ok()) return k.status();
  absl::StatusOr<int> per_sm = cache.runtime().ResidentCtasPerSm(*k, threads);
  if (!per_sm.ok()) return per_sm.status();
  BlockTileLaunch plan;
  plan.kernel = *k;
  plan.grid = BlockTileGrid(n, blocksize, threads, per_thread, *info, *per_sm);
  plan.block.x = static_cast<unsigned>(threads);
  return plan;
}

}  // namespace bnb::jit
