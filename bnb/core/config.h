// The effective value of every knob, from layers (later wins):
//   defaults < $XDG_CONFIG_HOME/bnb/config.toml (else ~/.config/bnb/config.toml) < ./bnb.toml
//   < the file named by BNB_CONFIG < BNB_<SECTION>_<KEY> environment variables < Set() at run time.
// Files and the environment are read on first use and again on Reload(); Set() values survive a Reload().
//
// Another user must not choose what bnb does, nor a broken setting stop work that does not need it:
//   - A config file another user controls (owned by another user, or writable by group or others; see trust.h),
//     or that is no regular file (a FIFO, which is never waited on; a directory) or cannot be read, is not read:
//     a warning names it and why, once per file and process.
//   - A knob that names code to load (KnobSpec::loads_code) is taken from the user's own file, BNB_CONFIG, the
//     environment or Set(), never from ./bnb.toml: a value there gives a warning and is ignored (its source says so).
//   - A file that does not parse (TOML syntax, an unknown section or key) fails every read of the configuration,
//     naming file:line. A bad value fails only the reads of its knob where BrokenSettingFails (the cpu knobs);
//     any other knob gives one warning and its default (the source says why). The first broken setting of a knob
//     stands: a later layer does not hide it.
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
  absl::Status error;  // the knob's setting is broken: what is wrong and where (value is then the default)
};

// bnb's directory under an XDG base directory: $<var>/bnb, else $HOME/<home_default>/bnb (e.g. var
// "XDG_CACHE_HOME", home_default ".cache"); empty when neither is set. A relative $<var> is ignored, as the XDG
// base directory spec says, and so is a relative $HOME: it would make the working directory's files the user's own
// (a user config may name code to load, a project file may not).
std::string XdgBnbDir(const char* var, const char* home_default);

// Parses one TOML config file's text into `out` (knob name -> entry), `path` naming it in messages. The error
// returned is the file's: a TOML syntax error, an unknown section or key, an overlong line. A wrong type or an
// out-of-range value is the knob's: an entry holding the error. Errors read "path:line:col: message" and name
// the key. In a project file (./bnb.toml) a knob that loads code is ignored, with a warning.
absl::Status ParseConfig(const std::string& path, const std::string& text, bool project_file,
                         absl::flat_hash_map<std::string, ConfigEntry>* out);

class Config {
 public:
  // The process-wide configuration.
  static Config& Global();

  // Reads the files and the environment again. The error lists every problem found (a file that does not parse,
  // every broken setting); the values loaded before, if any, then stay in force.
  absl::Status Reload();

  // A knob's effective value; an error when the files do not parse, or when its setting is broken and
  // BrokenSettingFails (any other broken knob has its default).
  absl::StatusOr<ConfigEntry> Get(absl::string_view name);
  absl::StatusOr<int64_t> GetInt(absl::string_view name);
  absl::StatusOr<bool> GetBool(absl::string_view name);
  absl::StatusOr<std::string> GetString(absl::string_view name);

  // The run-time layer. Set validates like every other layer; Unset(name) drops one run-time value,
  // ResetRuntime() all of them.
  absl::Status Set(absl::string_view name, const KnobValue& value);
  absl::Status Unset(absl::string_view name);
  void ResetRuntime();

  // What is wrong with the knob's setting, also where Get() gives its default instead (for a command that must
  // not act on the default in its place, as `cache clear`); OK when a Set() value is in force.
  absl::Status SettingStatus(absl::string_view name);
  // The error any read of a knob whose broken setting fails would give (the files do not parse, or such a knob's
  // setting is broken): what CPU work checks before it runs.
  absl::Status FailingProblem();

  // Every knob, in declaration order, with its effective value and where it came from.
  absl::StatusOr<std::vector<ConfigEntry>> Effective();

  // Changes whenever any effective value may have changed; cheap to read.
  uint64_t generation();

 private:
  absl::Status EnsureLoaded();
  absl::StatusOr<ConfigEntry> GetLocked(absl::string_view name);  // mu_ held, values loaded

  std::mutex mu_;
  bool loaded_ = false;
  absl::Status load_error_;                                       // a file that does not parse: fails every read
  absl::flat_hash_map<std::string, ConfigEntry> loaded_values_;   // defaults, files, env
  absl::flat_hash_map<std::string, ConfigEntry> runtime_values_;  // Set()
  uint64_t generation_ = 1;
};

}  // namespace bnb::core
