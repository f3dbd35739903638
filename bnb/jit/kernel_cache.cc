#include "bnb/jit/kernel_cache.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bnb/core/config.h"
#include "bnb/jit/cache_key.h"
#include "bnb/jit/default_backend.h"
#include "bnb/jit/kernel_sources.h"

namespace bnb::jit {
namespace {

// Every field of the spec, unambiguously (ValidateSpec rejects NUL bytes in fields).
std::string SpecFields(const KernelSpec& s) {
  std::string out = absl::StrCat(s.template_name, std::string(1, '\0'), s.entry, std::string(1, '\0'), s.arch);
  for (const auto& [n, v] : s.template_args) absl::StrAppend(&out, std::string(1, '\0'), "a:", n, "=", v);
  for (const auto& [n, v] : s.knobs) absl::StrAppend(&out, std::string(1, '\0'), "k:", n, "=", v);
  return out;
}

const std::vector<SourceFile>& AllHeaders() {
  static const std::vector<SourceFile>* const headers = [] {
    auto* v = new std::vector<SourceFile>;
    for (const EmbeddedFile& f : KernelFiles()) v->push_back({f.name, f.text});
    return v;
  }();
  return *headers;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

KernelCache& KernelCache::Global() {
  static KernelCache* const cache = new KernelCache();
  return *cache;
}

KernelCache::KernelCache(KernelCacheOptions options)
    : options_(std::move(options)),
      compiler_(options_.compiler ? options_.compiler : DefaultCompiler()),
      runtime_(options_.runtime ? options_.runtime : &DefaultRuntime()) {}

std::shared_ptr<DiskCache> KernelCache::Disk() {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.disk.has_value()) {
    if (!disk_) disk_ = std::make_shared<DiskCache>(*options_.disk);
    return disk_;
  }
  core::Config& config = core::Config::Global();
  const uint64_t gen = config.generation();
  if (disk_ && gen == disk_generation_) return disk_;
  disk_generation_ = gen;
  absl::StatusOr<std::string> dir = config.GetString("cache.dir");
  absl::StatusOr<bool> enabled = config.GetBool("cache.enabled");
  const std::string d = dir.ok() ? *dir : std::string();
  const bool e = enabled.ok() ? *enabled : true;
  if (!disk_ || d != disk_dir_setting_ || e != disk_enabled_setting_) {
    disk_dir_setting_ = d;
    disk_enabled_setting_ = e;
    disk_ = std::make_shared<DiskCache>(DiskCacheOptions{d, e, options_.warn});
    if (!dir.ok() || !enabled.ok()) {
      OnceWarner(options_.warn)
          .Warn("config", absl::StrCat("cannot read the cache configuration (",
                                       (!dir.ok() ? dir.status() : enabled.status()).ToString(),
                                       "); using the default cache directory"));
    }
  }
  return disk_;
}

absl::StatusOr<std::string> KernelCache::Key(const KernelSpec& spec) {
  const std::string fields = SpecFields(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = keys_.find(fields); it != keys_.end()) return it->second;
  }
  if (absl::Status st = ValidateSpec(spec); !st.ok()) return st;
  if (absl::Status st = compiler_->CheckTarget(spec.arch); !st.ok()) return st;
  absl::StatusOr<absl::string_view> text = KernelSource(spec.template_name);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::string> version = compiler_->Version();
  if (!version.ok()) return version.status();
  absl::StatusOr<std::vector<std::string>> options = compiler_->Options(spec);
  if (!options.ok()) return options.status();
  std::string key = CacheKey(spec, *text, AllHeaders(), *version, *options);
  std::lock_guard<std::mutex> lock(mu_);
  keys_.emplace(fields, key);
  return key;
}

absl::StatusOr<std::shared_ptr<const Binary>> KernelCache::GetBinary(const KernelSpec& spec) {
  absl::StatusOr<std::string> key = Key(spec);
  if (!key.ok()) return key.status();
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Entry>& e = entries_[*key];
    if (!e) e = std::make_shared<Entry>();
    entry = e;
  }
  std::lock_guard<std::mutex> entry_lock(entry->mu);  // one compile per key; others wait here
  if (entry->binary) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.memory_hits;
    return entry->binary;
  }
  std::shared_ptr<DiskCache> disk = Disk();
  auto t0 = std::chrono::steady_clock::now();
  if (std::optional<Binary> b = disk->Load(*key)) {
    entry->binary = std::make_shared<const Binary>(*std::move(b));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.disk_hits;
    stats_.disk_load_ms += MsSince(t0);
    return entry->binary;
  }
  absl::StatusOr<std::vector<std::string>> options = compiler_->Options(spec);
  if (!options.ok()) return options.status();
  const std::string source = absl::StrCat("#include \"", spec.template_name, ".cuh\"\n");
  t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Binary> b = compiler_->Compile(spec, source, AllHeaders(), *options);
  const double ms = MsSince(t0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (b.ok()) {
      ++stats_.compiles;
    } else {
      ++stats_.compile_failures;
    }
    stats_.compile_ms += ms;
  }
  if (!b.ok()) return b.status();
  disk->Store(*key, *b).IgnoreError();  // best effort: it warned, and the kernel still runs from memory
  entry->binary = std::make_shared<const Binary>(*std::move(b));
  return entry->binary;
}

absl::StatusOr<LoadedKernel> KernelCache::GetKernel(const KernelSpec& spec_in, int device) {
  const std::string fast = absl::StrCat(SpecFields(spec_in), std::string(1, '\0'), "device=", device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = loaded_.find(fast); it != loaded_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  // Also checks the device exists before anything is compiled for it.
  absl::StatusOr<DeviceInfo> info = runtime_->GetDeviceInfo(device);
  if (!info.ok()) return info.status();
  KernelSpec spec = spec_in;
  if (spec.arch.empty()) spec.arch = info->target;
  absl::StatusOr<std::shared_ptr<const Binary>> binary = GetBinary(spec);
  if (!binary.ok()) return binary.status();
  absl::StatusOr<std::string> key = Key(spec);
  if (!key.ok()) return key.status();
  std::lock_guard<std::mutex> load_lock(load_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = modules_.find({*key, device}); it != modules_.end()) {
      loaded_[fast] = it->second;
      return it->second;
    }
  }
  absl::StatusOr<LoadedKernel> k = LoadKernel(*runtime_, **binary, device);
  if (!k.ok()) {
    return absl::Status(k.status().code(),
                        absl::StrCat(k.status().message(), "; kernel ", spec.DebugString(), ", key ", *key));
  }
  std::lock_guard<std::mutex> lock(mu_);
  modules_[{*key, device}] = *k;
  loaded_[fast] = *k;
  return k;
}

absl::Status KernelCache::Warm(const std::vector<KernelSpec>& specs, const std::string& arch,
                               const std::function<void(size_t, size_t, const KernelSpec&)>& progress) {
  // Checked once up front: a bad arch would otherwise fail every spec alike, and a warm into no disk cache would
  // report success while leaving nothing to ship.
  if (absl::Status st = compiler_->CheckTarget(arch); !st.ok()) return st;
  if (absl::Status st = DiskSettingsStatus(); !st.ok()) return st;
  // One directory for the whole run, though cache.dir may change meanwhile; and every kernel must end up in it,
  // also those this process already holds in memory (GetBinary then touches no disk: after a clear, or a change
  // of cache.dir, a warm stored nothing and reported success).
  const std::shared_ptr<DiskCache> disk = Disk();
  if (absl::Status st = disk->Usable(); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cache warm: ", st.message()));
  }
  std::vector<std::string> failures;
  for (size_t i = 0; i < specs.size(); ++i) {
    KernelSpec s = specs[i];
    s.arch = arch;
    absl::StatusOr<std::shared_ptr<const Binary>> b = GetBinary(s);
    // A missing compiler (NVRTC) fails every spec alike: say it once.
    if (!b.ok() && absl::IsFailedPrecondition(b.status())) return b.status();
    absl::Status stored = b.status();
    if (stored.ok()) {
      absl::StatusOr<std::string> key = Key(s);
      stored = key.status();
      if (key.ok() && !disk->Load(*key).has_value()) stored = disk->Store(*key, **b);
    }
    if (!stored.ok()) failures.push_back(absl::StrCat(s.DebugString(), ": ", stored.message()));
    if (progress) progress(i + 1, specs.size(), s);
  }
  if (failures.empty()) return absl::OkStatus();
  const size_t shown = std::min<size_t>(failures.size(), 8);  // a full disk fails them all alike
  return absl::InternalError(absl::StrCat(
      "cache warm: ", failures.size(), " of ", specs.size(), " kernels failed (cache ", disk->dir(), "):\n",
      absl::StrJoin(failures.begin(), failures.begin() + shown, "\n"),
      shown < failures.size() ? absl::StrCat("\n... and ", failures.size() - shown, " more") : ""));
}

Stats KernelCache::GetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KernelCache::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = Stats();
}

absl::Status KernelCache::DiskSettingsStatus() {
  if (options_.disk.has_value()) return absl::OkStatus();
  // Not the defaults Disk() falls back to: `cache clear` must not empty the default cache when cache.dir is wrong.
  core::Config& config = core::Config::Global();
  if (absl::Status st = config.SettingStatus("cache.dir"); !st.ok()) return st;
  return config.SettingStatus("cache.enabled");
}

absl::StatusOr<std::vector<CacheFileInfo>> KernelCache::ListDisk() {
  if (absl::Status st = DiskSettingsStatus(); !st.ok()) return st;
  return Disk()->List();
}

absl::StatusOr<int> KernelCache::ClearDisk() {
  if (absl::Status st = DiskSettingsStatus(); !st.ok()) return st;
  return Disk()->Clear();
}

std::string KernelCache::DiskDir() { return Disk()->dir(); }

Stats GetStats() { return KernelCache::Global().GetStats(); }

}  // namespace bnb::jit
