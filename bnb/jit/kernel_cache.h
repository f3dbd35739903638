// Getting a kernel: memory cache (per process, per device context) -> disk cache -> compile. The entry point the
// ops layer uses (see GetKernel), plus the statistics and cache management behind `bnb.jit.stats()` and
// `python -m bnb cache list | clear | warm`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "bnb/jit/compiler.h"
#include "bnb/jit/disk_cache.h"
#include "bnb/jit/kernel_spec.h"
#include "bnb/jit/runtime.h"
#include "bnb/jit/warnings.h"

namespace bnb::jit {

struct Stats {
  int64_t memory_hits = 0;       // kernels found already compiled (and loaded) in this process
  int64_t disk_hits = 0;         // kernels read from the disk cache
  int64_t compiles = 0;          // successful compiles
  int64_t compile_failures = 0;  // compiles that returned an error
  double compile_ms = 0;         // total wall time of all compiles
  double disk_load_ms = 0;       // total wall time of all disk-cache hits (read + checks)
};

struct KernelCacheOptions {
  // null: DefaultCompiler() (NVRTC). Its Version() and Options(spec) must not change while the cache lives.
  std::shared_ptr<Compiler> compiler;
  // nullopt: follow bnb::core::Config's cache.dir and cache.enabled, re-read whenever the config changes.
  std::optional<DiskCacheOptions> disk;
  // Where warnings go when the config supplies the disk options (null: stderr).
  WarningSink warn;
  // What loads and launches the kernels (null: DefaultRuntime(), the CUDA driver); it must outlive the cache and
  // name its devices' targets as `compiler` does.
  Runtime* runtime = nullptr;
};

class KernelCache {
 public:
  // The process-wide cache the ops layer uses: NVRTC, disk options from bnb::core::Config.
  static KernelCache& Global();

  explicit KernelCache(KernelCacheOptions options = {});

  // The spec's cache key (64 hex digits); see cache_key.h. Fails for a malformed spec, an unknown template, or
  // when the compiler is unavailable (NVRTC missing) or cannot target spec.arch.
  absl::StatusOr<std::string> Key(const KernelSpec& spec);

  // The compiled kernel, from memory, else disk, else compiled (and then stored on disk). Thread-safe; at most
  // one compile per key runs at a time in this process, other callers for that key wait for it. A compile
  // error is returned (and not cached: the next call tries again). Cache problems only warn.
  absl::StatusOr<std::shared_ptr<const Binary>> GetBinary(const KernelSpec& spec);

  // GetBinary, then loaded by the runtime onto device `device`, once per (key, device). An empty spec.arch means
  // the device's own target. The fast path (already loaded) is one mutex and one hash lookup.
  absl::StatusOr<LoadedKernel> GetKernel(const KernelSpec& spec, int device);

  // The runtime the kernels of GetKernel run on.
  Runtime& runtime() { return *runtime_; }

  // Compiles every spec for `arch` (overriding spec.arch) into the caches without touching a GPU. Calls
  // `progress(done, total, spec)` after each. Keeps going after a failure; the error lists every one that failed.
  absl::Status Warm(const std::vector<KernelSpec>& specs, const std::string& arch,
                    const std::function<void(size_t done, size_t total, const KernelSpec& spec)>& progress = nullptr);

  Stats GetStats();
  void ResetStats();

  // The disk cache's files; remove them all. Errors when the disk cache is off or unusable, or when its knobs
  // cannot be read (a bad cache.dir must not list or clear the default directory instead).
  absl::StatusOr<std::vector<CacheFileInfo>> ListDisk();
  absl::StatusOr<int> ClearDisk();
  // The disk cache directory in use; empty when it is off or unusable.
  std::string DiskDir();

 private:
  struct Entry {
    std::mutex mu;
    std::shared_ptr<const Binary> binary;
  };
  std::shared_ptr<DiskCache> Disk();
  // What is wrong with the cache.dir and cache.enabled settings, if anything (Disk() uses the defaults instead).
  absl::Status DiskSettingsStatus();

  KernelCacheOptions options_;
  std::shared_ptr<Compiler> compiler_;
  Runtime* runtime_;

  std::mutex mu_;  // guards everything below
  absl::flat_hash_map<std::string, std::string> keys_;                  // spec fields -> key
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_;    // key -> entry
  absl::flat_hash_map<std::string, LoadedKernel> loaded_;               // spec fields + device -> kernel
  std::map<std::pair<std::string, int>, LoadedKernel> modules_;        // (key, device) -> kernel
  Stats stats_;
  std::shared_ptr<DiskCache> disk_;
  uint64_t disk_generation_ = 0;
  std::string disk_dir_setting_;
  bool disk_enabled_setting_ = true;

  std::mutex load_mu_;  // serializes module loads
};

// KernelCache::Global().GetStats(), for bnb.jit.stats().
Stats GetStats();

}  // namespace bnb::jit
