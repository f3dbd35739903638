#include "bnb/core/cpu_settings.h"

#include <atomic>
#include <mutex>

#include "bnb/core/config.h"
#include "bnb/core/cpu_isa.h"

namespace bnb::core {

absl::StatusOr<CpuSettings> CurrentCpuSettings() {
  static std::atomic<uint64_t> applied_generation{0};
  static std::mutex apply_mu;
  Config& config = Config::Global();
  if (applied_generation.load(std::memory_order_acquire) != config.generation()) {
    // One applier at a time, each reading the generation under the lock: otherwise a thread that read an older
    // generation and its cpu.isa could apply them after another applied a newer one, and mark the stale cap as
    // current until the next config change. The generation is read before the value, so a change in between
    // only makes the next call apply again.
    std::lock_guard<std::mutex> lock(apply_mu);
    const uint64_t generation = config.generation();
    if (applied_generation.load(std::memory_order_acquire) != generation) {
      // Any broken cpu knob fails CPU work, also one read elsewhere (cpu.huge_pages); a broken cache or CUDA
      // knob does not (config.h).
      if (absl::Status st = config.FailingProblem(); !st.ok()) return st;
      absl::StatusOr<std::string> isa = config.GetString("cpu.isa");
      if (!isa.ok()) return isa.status();
      if (absl::Status st = SetIsaCap(*isa); !st.ok()) return st;
      absl::StatusOr<bool> amx = config.GetBool("cpu.amx");
      if (!amx.ok()) return amx.status();
      SetAmxAllowed(*amx);
      applied_generation.store(generation, std::memory_order_release);
    }
  }
  absl::StatusOr<int64_t> threads = config.GetInt("cpu.threads");
  if (!threads.ok()) return threads.status();
  absl::StatusOr<int64_t> grain = config.GetInt("cpu.grain_elements");
  if (!grain.ok()) return grain.status();
  absl::StatusOr<bool> bf16_products = config.GetBool("cpu.gemv_bf16_products");
  if (!bf16_products.ok()) return bf16_products.status();
  return CpuSettings{*threads, *grain, *bf16_products};
}

}  // namespace bnb::core
