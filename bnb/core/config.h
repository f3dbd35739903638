// The effective value of every knob, from layers (later wins):
//   defaults < $XDG_CONFIG_HOME/bnb/config.toml (else ~/.config/bnb/config.toml) < ./bnb.toml
//   < the file named by BNB_CONFIG < BNB_<SECTION>_<KEY> environment variables < Set() at run time.
// Files and the environment are read on first use and again on Reload(); Set() values survive a Reload().
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bnb/core/knobs.h"

namespace bnb::core {

struct ConfigEntry {
  const KnobSpec* spec;
  KnobValue value;
  std::string source;  // "default", "<file as looked up>:3" (e.g. bnb.toml:3), "env BNB_CPU_ISA", "bnb.config.set"
};

// bnb's directory under an XDG base directory: $<var>/bnb, else $HOME/<home_default>/bnb (e.g. var
// "XDG_CACHE_HOME", home_default ".cache"); empty when neither is set. A relative $<var> is ignored, as the XDG
// base directory spec says.
std::string XdgBnbDir(const char* var, const char* home_default);

// Parses one TOML config file into `out` (knob name -> entry). Errors read "path:line:col: message" and name the
// key: an unknown section or key, a wrong type, an out-of-range value, or a TOML syntax error.
absl::Status ParseConfigFile(const std::string& path, absl::flat_hash_map<std::string, ConfigEntry>* out);

class Config {
 public:
  // The process-wide configuration.
  static Config& Global();

  // Reads the files and the environment again. On error the previous values stay in force.
  absl::Status Reload();

  absl::StatusOr<ConfigEntry> Get(absl::string_view name);
  absl::StatusOr<int64_t> GetInt(absl::string_view name);
  absl::StatusOr<bool> GetBool(absl::string_view name);
  absl::StatusOr<std::string> GetString(absl::string_view name);

  // The run-time layer. Set validates like every other layer; Unset(name) drops one run-time value,
  // ResetRuntime() all of them.
  absl::Status Set(absl::string_view name, const KnobValue& value);
  absl::Status Unset(absl::string_view name);
  void ResetRuntime();

  // Every knob, in declaration order, with its effective value and where it came from.
  absl::StatusOr<std::vector<ConfigEntry>> Effective();

  // Changes whenever any effective value may have changed; cheap to read.
  uint64_t generation();

 private:
  absl::Status EnsureLoaded();
  absl::StatusOr<ConfigEntry> GetLocked(absl::string_view name);  // mu_ held, values loaded

  std::mutex mu_;
  bool loaded_ = false;
  absl::flat_hash_map<std::string, ConfigEntry> loaded_values_;   // defaults, files, env
  absl::flat_hash_map<std::string, ConfigEntry> runtime_values_;  // Set()
  uint64_t generation_ = 1;
};

}  // namespace bnb::core
