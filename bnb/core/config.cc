#include "bnb/core/config.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bnb/core/trust.h"
#include "bnb/core/warnings.h"
#include "toml++/toml.h"

namespace bnb::core {
namespace {

std::string Where(const std::string& path, const toml::source_region& r) {
  return absl::StrCat(path, ":", r.begin.line, ":", r.begin.column);
}

absl::StatusOr<KnobValue> TomlValue(const KnobSpec& spec, const toml::node& node) {
  if (spec.type == KnobType::kInt && node.is_integer()) return KnobValue(node.as_integer()->get());
  if (spec.type == KnobType::kBool && node.is_boolean()) return KnobValue(node.as_boolean()->get());
  if (spec.type == KnobType::kString && node.is_string()) return KnobValue(node.as_string()->get());
  std::ostringstream shown;
  node.visit([&](const auto& n) { shown << n; });
  return absl::InvalidArgumentError(
      absl::StrCat(spec.name, ": expected ", KnobTypeName(spec.type), ", got ", shown.str()));
}

// $XDG_CONFIG_HOME/bnb/config.toml, else ~/.config/bnb/config.toml; empty when neither variable is set.
std::string UserConfigPath() {
  const std::string dir = XdgBnbDir("XDG_CONFIG_HOME", ".config");
  return dir.empty() ? "" : absl::StrCat(dir, "/config.toml");
}

absl::Status UnknownKey(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("unknown config key '", name, "' (python -m bnb config lists every key)"));
}

// `path` made absolute, to name a file in a warning: ./bnb.toml is another file in another directory.
std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) ? absl::StrCat(cwd, "/", path) : path;
}

// A knob's broken setting, as an entry: the default, and the error saying what and where.
ConfigEntry Broken(const KnobSpec& spec, absl::Status error) {
  std::string source = absl::StrCat("default (ignored: ", error.message(), ")");
  return ConfigEntry{&spec, spec.default_value, std::move(source), std::move(error)};
}

// A layer's setting of a knob, in place of the layers' below unless one of those was broken: the first broken
// setting stands, so a value set elsewhere does not hide it.
void Put(absl::flat_hash_map<std::string, ConfigEntry>* values, ConfigEntry e) {
  ConfigEntry& slot = (*values)[std::string(e.spec->name)];
  if (slot.error.ok()) slot = std::move(e);
}

// Every problem found, one a line: a file that does not parse, then each broken setting.
absl::Status AllProblems(const absl::Status& load_error,
                         const absl::flat_hash_map<std::string, ConfigEntry>& values) {
  std::vector<std::string> lines;
  if (!load_error.ok()) lines.emplace_back(load_error.message());
  for (const KnobSpec& spec : AllKnobs()) {
    auto it = values.find(std::string(spec.name));
    if (it != values.end() && !it->second.error.ok()) lines.emplace_back(it->second.error.message());
  }
  return lines.empty() ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

// A config file's lines are at most this long: toml++ nests a table per part of a dotted key without limit, and
// some 40,000 parts on one line overflowed the stack (a crash, not an error). 4096 bytes hold any knob's line (a
// path is at most PATH_MAX) and at most 2048 parts, which toml++ handles.
constexpr size_t kMaxLine = 4096;
constexpr int64_t kMaxConfigBytes = int64_t{1} << 20;  // a config is a few lines: nothing larger is read

absl::Status CheckLineLengths(const std::string& path, const std::string& s) {
  size_t line = 1, start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find('\n', start), s.size());
    if (end - start > kMaxLine) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": a line of ", end - start,
                                                     " bytes; a bnb config's lines are at most ", kMaxLine));
    }
    start = end + 1;
    ++line;
  }
  return absl::OkStatus();
}

struct ConfigFile {
  std::string path;
  bool project;   // ./bnb.toml: whoever can write the working directory may have written it
  bool required;  // BNB_CONFIG's: its absence is an error
};

// The values of every layer below Set(), and the error of a file that does not parse (*load_error).
absl::flat_hash_map<std::string, ConfigEntry> ReadLayers(absl::Status* load_error) {
  absl::flat_hash_map<std::string, ConfigEntry> values;
  for (const KnobSpec& spec : AllKnobs()) values[spec.name] = ConfigEntry{&spec, spec.default_value, "default"};
  std::vector<ConfigFile> files = {{UserConfigPath(), false, false}, {"bnb.toml", true, false}};
  if (const char* explicit_file = std::getenv("BNB_CONFIG"); explicit_file && *explicit_file) {
    files.push_back({explicit_file, false, true});
  }
  for (const ConfigFile& f : files) {
    if (f.path.empty()) continue;
    const std::string absolute = Absolute(f.path);
    absl::StatusOr<std::string> text =
        ReadTrustedFile(absolute, geteuid(), /*follow_symlink=*/true, kMaxConfigBytes);
    if (absl::IsNotFound(text.status())) {
      if (!f.required) continue;
      *load_error = absl::InvalidArgumentError(absl::StrCat("BNB_CONFIG names ", f.path, ", which does not exist"));
      return values;
    }
    if (!text.ok()) {
      WarnOnce(absl::StrCat("config file ", absolute),
               absl::StrCat("config file ", text.status().message(), ": it is not read (",
                            f.required ? "though BNB_CONFIG names it; " : "",
                            "a config file must be a regular file that only you can write)"));
      continue;
    }
    if (absl::Status st = ParseConfig(f.path, *text, f.project, &values); !st.ok()) {
      *load_error = std::move(st);
      return values;
    }
  }
  for (const KnobSpec& spec : AllKnobs()) {
    const std::string env = KnobEnvName(spec.name);
    const char* text = std::getenv(env.c_str());
    if (!text) continue;
    KnobValue v;
    if (absl::Status st = ParseKnob(spec, text, &v); !st.ok()) {
      Put(&values, Broken(spec, absl::InvalidArgumentError(
                                    absl::StrCat("environment variable ", env, ": ", st.message()))));
    } else {
      Put(&values, ConfigEntry{&spec, v, absl::StrCat("env ", env)});
    }
  }
  return values;
}

// One warning per broken setting of a knob that keeps its default rather than failing its readers.
void WarnOfDefaults(const absl::flat_hash_map<std::string, ConfigEntry>& values) {
  for (const KnobSpec& spec : AllKnobs()) {
    const absl::Status& error = values.at(std::string(spec.name)).error;
    if (error.ok() || BrokenSettingFails(spec)) continue;
    WarnOnce(absl::StrCat("broken ", spec.name, ": ", error.message()),
             absl::StrCat(error.message(), "; ", spec.name, " keeps its default, ",
                          KnobValueToString(spec.default_value), " (CPU work goes on: it does not read ",
                          spec.name, ")"));
  }
}

}  // namespace

std::string XdgBnbDir(const char* var, const char* home_default) {
  if (const char* x = std::getenv(var); x && x[0] == '/') return absl::StrCat(x, "/bnb");
  if (const char* h = std::getenv("HOME"); h && h[0] == '/') return absl::StrCat(h, "/", home_default, "/bnb");
  return "";
}

absl::Status ParseConfig(const std::string& path, const std::string& text, bool project_file,
                         absl::flat_hash_map<std::string, ConfigEntry>* out) {
  if (absl::Status st = CheckLineLengths(path, text); !st.ok()) return st;
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(path, e.source()), ": ", std::string(e.description())));
  }
  for (const auto& [section, node] : root) {
    const toml::table* table = node.as_table();
    if (!table) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path, node.source()), ": '", std::string(section.str()),
                                                     "' must be a [section] table (e.g. [cpu])"));
    }
    // An empty section with no knob: a misspelt header whose keys are commented out. (Keys name themselves below.)
    const std::string prefix = absl::StrCat(std::string(section.str()), ".");
    if (table->empty() && std::none_of(AllKnobs().begin(), AllKnobs().end(),
                                       [&](const KnobSpec& k) { return absl::StartsWith(k.name, prefix); })) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path, node.source()), ": unknown section '",
                                                     std::string(section.str()), "'"));
    }
    for (const auto& [key, value] : *table) {
      const std::string name = absl::StrCat(std::string(section.str()), ".", std::string(key.str()));
      const KnobSpec* spec = FindKnob(name);
      if (!spec) {
        return absl::InvalidArgumentError(absl::StrCat(Where(path, key.source()), ": unknown key '", name,
                                                       "' (python -m bnb config lists every key)"));
      }
      const std::string line = absl::StrCat(path, ":", value.source().begin.line);
      if (project_file && spec->loads_code) {
        const std::string user_file = UserConfigPath();
        WarnOnce(absl::StrCat("project ", Absolute(path), " sets ", name),
                 absl::StrCat(line, ": ", name, " is ignored: it names code to load, which a project's bnb.toml ",
                              "may not choose (whoever can write this directory would choose what runs). Set it in ",
                              user_file.empty() ? "your own config file" : user_file, ", the file BNB_CONFIG names, ",
                              KnobEnvName(name), " or bnb.config.set"));
        ConfigEntry& slot = (*out)[name];
        if (slot.spec == nullptr) slot = ConfigEntry{spec, spec->default_value, "default"};
        absl::StrAppend(&slot.source, " (", line, " ignored: a project file may not name code to load)");
        continue;
      }
      absl::StatusOr<KnobValue> v = TomlValue(*spec, value);
      absl::Status st = v.ok() ? ValidateKnob(*spec, *v) : v.status();
      if (!st.ok()) {
        Put(out, Broken(*spec, absl::InvalidArgumentError(absl::StrCat(Where(path, value.source()), ": ",
                                                                       st.message()))));
      } else {
        Put(out, ConfigEntry{spec, *v, line});
      }
    }
  }
  return absl::OkStatus();
}

Config& Config::Global() {
  static Config* config = new Config();  // never destroyed: kernels may read it during process exit
  return *config;
}

absl::Status Config::Reload() {
  absl::Status load_error;
  absl::flat_hash_map<std::string, ConfigEntry> values = ReadLayers(&load_error);
  const absl::Status problems = AllProblems(load_error, values);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!problems.ok() && loaded_) return problems;  // the values in force stay
    loaded_values_ = values;
    load_error_ = load_error;
    loaded_ = true;
    ++generation_;
  }
  if (load_error.ok()) WarnOfDefaults(values);
  return problems;
}

absl::Status Config::EnsureLoaded() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (loaded_) return absl::OkStatus();
  }
  // Whatever it found is in force now, problems included: each read reports its own. Two threads racing here
  // both read the same files; the first one's values stay.
  Reload().IgnoreError();
  return absl::OkStatus();
}

absl::StatusOr<ConfigEntry> Config::GetLocked(absl::string_view name) {
  if (!load_error_.ok()) return load_error_;
  const std::string key(name);
  if (auto it = runtime_values_.find(key); it != runtime_values_.end()) return it->second;
  if (auto it = loaded_values_.find(key); it != loaded_values_.end()) {
    if (!it->second.error.ok() && BrokenSettingFails(*it->second.spec)) return it->second.error;
    return it->second;
  }
  return UnknownKey(name);
}

absl::StatusOr<ConfigEntry> Config::Get(absl::string_view name) {
  if (absl::Status st = EnsureLoaded(); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  return GetLocked(name);
}

absl::StatusOr<int64_t> Config::GetInt(absl::string_view name) {
  absl::StatusOr<ConfigEntry> e = Get(name);
  if (!e.ok()) return e.status();
  return std::get<int64_t>(e->value);
}

absl::StatusOr<bool> Config::GetBool(absl::string_view name) {
  absl::StatusOr<ConfigEntry> e = Get(name);
  if (!e.ok()) return e.status();
  return std::get<bool>(e->value);
}

absl::StatusOr<std::string> Config::GetString(absl::string_view name) {
  absl::StatusOr<ConfigEntry> e = Get(name);
  if (!e.ok()) return e.status();
  return std::get<std::string>(e->value);
}

absl::Status Config::SettingStatus(absl::string_view name) {
  if (!FindKnob(name)) return UnknownKey(name);
  if (absl::Status st = EnsureLoaded(); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  if (!load_error_.ok()) return load_error_;
  if (runtime_values_.contains(name)) return absl::OkStatus();
  return loaded_values_.at(name).error;
}

absl::Status Config::FailingProblem() {
  if (absl::Status st = EnsureLoaded(); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  for (const KnobSpec& spec : AllKnobs()) {
    if (!BrokenSettingFails(spec)) continue;
    if (absl::StatusOr<ConfigEntry> e = GetLocked(spec.name); !e.ok()) return e.status();
  }
  return load_error_;
}

absl::Status Config::Set(absl::string_view name, const KnobValue& value) {
  const KnobSpec* spec = FindKnob(name);
  if (!spec) return UnknownKey(name);
  if (absl::Status st = ValidateKnob(*spec, value); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  runtime_values_[std::string(name)] = ConfigEntry{spec, value, "bnb.config.set"};
  ++generation_;
  return absl::OkStatus();
}

absl::Status Config::Unset(absl::string_view name) {
  if (!FindKnob(name)) return UnknownKey(name);
  std::lock_guard<std::mutex> lock(mu_);
  runtime_values_.erase(std::string(name));
  ++generation_;
  return absl::OkStatus();
}

void Config::ResetRuntime() {
  std::lock_guard<std::mutex> lock(mu_);
  runtime_values_.clear();
  ++generation_;
}

absl::StatusOr<std::vector<ConfigEntry>> Config::Effective() {
  if (absl::Status st = EnsureLoaded(); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ConfigEntry> out;
  for (const KnobSpec& spec : AllKnobs()) {
    absl::StatusOr<ConfigEntry> e = GetLocked(spec.name);
    if (!e.ok()) return e.status();
    out.push_back(*e);
  }
  return out;
}

uint64_t Config::generation() {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

}  // namespace bnb::core
