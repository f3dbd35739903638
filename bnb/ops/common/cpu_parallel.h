// Splitting a CPU kernel's blocks over torch's intra-op thread pool, as the cpu.* knobs say.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "bnb/core/cpu_settings.h"
#include "bnb/ops/common/checks.h"

namespace bnb::ops {

// A blockwise quantize's element costs about 4 times a dequantize's (one thread: ~0.2-0.4 ns against ~0.05-0.1), which
// cpu.grain_elements is sized for. Figures: tools/bench/NOTES.md, 'Task grain'.
inline constexpr int64_t kQuantizeCost = 4;

// The most tasks a kernel that splits its own work should make: torch's pool size (torch.set_num_threads), capped by
// cpu.threads where that knob is set. ParallelOverBlocks applies the same cap through its grain.
inline int64_t CpuTasks(const bnb::core::CpuSettings& s) {
  const int64_t pool = std::max<int64_t>(1, at::get_num_threads());
  return s.threads > 0 ? std::min<int64_t>(s.threads, pool) : pool;
}

// Calls fn(block_begin, block_end) over [0, num_blocks) on torch's pool (so torch.set_num_threads holds), with
// at least cpu.grain_elements elements per task and at most cpu.threads tasks when that knob is set. The knob is
// sized for the codecs' work per element; `cost`, how many times that an element of this kernel costs, divides it,
// so that a task holds about as much work whatever the kernel.
template <class Fn>
void ParallelOverBlocks(const char* op, int64_t num_blocks, int64_t block_elements, const Fn& fn, int64_t cost = 1) {
  absl::StatusOr<bnb::core::CpuSettings> s = bnb::core::CurrentCpuSettings();
  ThrowIfError(op, s.status());
  const int64_t per_block = std::max<int64_t>(1, block_elements) * std::max<int64_t>(1, cost);
  int64_t grain = std::max<int64_t>(1, s->grain_elements / per_block);
  if (s->threads > 0) grain = std::max(grain, (num_blocks + s->threads - 1) / s->threads);
  at::parallel_for(0, num_blocks, grain, fn);
}

}  // namespace bnb::ops
