#include "bnb/core/cpu_settings.h"

#include <atomic>

#include "bnb/core/config.h"
#include "bnb/core/cpu_isa.h"

namespace bnb::core {

absl::StatusOr<CpuSettings> CurrentCpuSettings() {
  static std::atomic<uint64_t> applied_generation{0};
  Config& config = Config::Global();
  const uint64_t generation = config.generation();
  if (applied_generation.load(std::memory_order_acquire) != generation) {
    absl::StatusOr<std::string> isa = config.GetString("cpu.isa");
    if (!isa.ok()) return isa.status();
    if (absl::Status st = SetIsaCap(*isa); !st.ok()) return st;
    applied_generation.store(generation, std::memory_order_release);
  }
  absl::StatusOr<int64_t> threads = config.GetInt("cpu.threads");
  if (!threads.ok()) return threads.status();
  absl::StatusOr<int64_t> grain = config.GetInt("cpu.grain_elements");
  if (!grain.ok()) return grain.status();
  return CpuSettings{*threads, *grain};
}

}  // namespace bnb::core
