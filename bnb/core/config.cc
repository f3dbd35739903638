#include "bnb/core/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// Whether a config file is at `path`: false when nothing is there; an error naming the path when something is that
// cannot be read as one (a directory, a FIFO, which would block the reader, a file without read permission).
absl::StatusOr<bool> ConfigFileAt(const std::string& path) {
  if (path.empty()) return false;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is not a regular file",
                                                   S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  }
  if (access(path.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " cannot be read: ", std::strerror(errno)));
  }
  return true;
}

absl::Status UnknownKey(absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("unknown config key '", name, "' (python -m bnb config lists every key)"));
}

// A config file's text, refused when a line is longer than any bnb config needs: toml++ nests a table per part of
// a dotted key without limit, and some 40,000 parts on one line overflowed the stack (a crash, not an error).
// 4096 bytes hold any knob's line (a path is at most PATH_MAX) and at most 2048 parts, which toml++ handles.
absl::StatusOr<std::string> ReadConfigText(const std::string& path) {
  constexpr size_t kMaxLine = 4096;
  std::ifstream in(path, std::ios::binary);
  std::string s;
  if (in) s.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " cannot be read: ", std::strerror(errno)));
  }
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
  return s;
}

}  // namespace

std::string XdgBnbDir(const char* var, const char* home_default) {
  if (const char* x = std::getenv(var); x && x[0] == '/') return absl::StrCat(x, "/bnb");
  if (const char* h = std::getenv("HOME"); h && *h) return absl::StrCat(h, "/", home_default, "/bnb");
  return "";
}

absl::Status ParseConfigFile(const std::string& path, absl::flat_hash_map<std::string, ConfigEntry>* out) {
  absl::StatusOr<std::string> text = ReadConfigText(path);
  if (!text.ok()) return text.status();
  toml::table root;
  try {
    root = toml::parse(*text, path);
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
      absl::StatusOr<KnobValue> v = TomlValue(*spec, value);
      absl::Status st = v.ok() ? ValidateKnob(*spec, *v) : v.status();
      if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(Where(path, value.source()), ": ", st.message()));
      (*out)[name] = ConfigEntry{spec, *v, absl::StrCat(path, ":", value.source().begin.line)};
    }
  }
  return absl::OkStatus();
}

Config& Config::Global() {
  static Config* config = new Config();  // never destroyed: kernels may read it during process exit
  return *config;
}

absl::Status Config::Reload() {
  absl::flat_hash_map<std::string, ConfigEntry> values;
  for (const KnobSpec& spec : AllKnobs()) values[spec.name] = ConfigEntry{&spec, spec.default_value, "default"};

  std::vector<std::string> files;
  for (const std::string& path : {UserConfigPath(), std::string("bnb.toml")}) {
    absl::StatusOr<bool> there = ConfigFileAt(path);
    if (!there.ok()) return there.status();
    if (*there) files.push_back(path);
  }
  if (const char* explicit_file = std::getenv("BNB_CONFIG"); explicit_file && *explicit_file) {
    absl::StatusOr<bool> there = ConfigFileAt(explicit_file);
    if (!there.ok()) return absl::InvalidArgumentError(absl::StrCat("BNB_CONFIG: ", there.status().message()));
    if (!*there) {
      return absl::InvalidArgumentError(absl::StrCat("BNB_CONFIG names ", explicit_file, ", which does not exist"));
    }
    files.push_back(explicit_file);
  }
  for (const std::string& f : files) {
    if (absl::Status st = ParseConfigFile(f, &values); !st.ok()) return st;
  }
  for (const KnobSpec& spec : AllKnobs()) {
    const std::string env = KnobEnvName(spec.name);
    const char* text = std::getenv(env.c_str());
    if (!text) continue;
    KnobValue v;
    if (absl::Status st = ParseKnob(spec, text, &v); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", env, ": ", st.message()));
    }
    values[spec.name] = ConfigEntry{&spec, v, absl::StrCat("env ", env)};
  }

  std::lock_guard<std::mutex> lock(mu_);
  loaded_values_ = std::move(values);
  loaded_ = true;
  ++generation_;
  return absl::OkStatus();
}

absl::Status Config::EnsureLoaded() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (loaded_) return absl::OkStatus();
  }
  return Reload();  // two threads racing here both load the same files; the last one wins, harmlessly
}

absl::StatusOr<ConfigEntry> Config::GetLocked(absl::string_view name) {
  const std::string key(name);
  if (auto it = runtime_values_.find(key); it != runtime_values_.end()) return it->second;
  if (auto it = loaded_values_.find(key); it != loaded_values_.end()) return it->second;
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
