// The TOML parser's errors, the layering order of Config, and what it refuses: config files another user controls
// or that are no regular file, knobs that load code from a project file, broken settings of knobs CPU work does
// not read (a warning and the default, never an error for CPU work).
#include "bnb/core/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <vector>

#include "bnb/core/cpu_settings.h"
#include "bnb/tests/captured_warnings.h"
#include "gtest/gtest.h"

namespace bnb::core {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The file's error, else the first knob's.
absl::Status Parse(const std::string& text) {
  absl::flat_hash_map<std::string, ConfigEntry> out;
  if (absl::Status st = ParseConfig("parse.toml", text, /*project_file=*/false, &out); !st.ok()) return st;
  for (const auto& [name, entry] : out) {
    if (!entry.error.ok()) return entry.error;
  }
  return absl::OkStatus();
}

void ExpectError(const std::string& text, const std::string& want) {
  absl::Status st = Parse(text);
  ASSERT_FALSE(st.ok()) << text;
  EXPECT_NE(st.message().find(want), absl::string_view::npos) << "message: " << st.message() << "\nwanted: " << want;
}

TEST(ConfigFile, ErrorsNameFileLineAndKey) {
  ExpectError("[cpu]\nthreads = 2\nthraeds = 3\n", "parse.toml:3:1: unknown key 'cpu.thraeds'");
  ExpectError("[cpu]\nthreads = \"two\"\n", "parse.toml:2:11: cpu.threads: expected an integer, got 'two'");
  ExpectError("[cpu]\nthreads = 100000\n", "parse.toml:2:11: cpu.threads: expected an integer in [0, 4096], got 100000");
  ExpectError("[cpu]\nisa = \"avx9000\"\n", "'avx9000' is not an instruction set");
  ExpectError("[gpu]\nthreads = 1\n", "unknown key 'gpu.threads'");
  ExpectError("threads = 1\n", "must be a [section] table");
  ExpectError("[cpu\nthreads = 1\n", "parse.toml:1:");
  ExpectError("[cache]\nenabled = 1\n", "cache.enabled: expected a boolean, got 1");
}

// 40,000 dotted parts on one line crashed the process (toml++ nests a table per part); long lines are errors now,
// and the longest allowed line parses (here as an unknown key, 2048 parts deep).
TEST(ConfigFile, ALongLineIsAnErrorNotACrash) {
  std::string header = "[a";
  for (int i = 0; i < 40000; ++i) header += ".a";
  ExpectError(header + "]\n", "parse.toml:1: a line of 80003 bytes; a bnb config's lines are at most 4096");
  ExpectError("[cpu]\nthreads = 1\n" + header.substr(1) + " = 1\n", "parse.toml:3: a line of 80005 bytes");
  std::string deep = "a";
  while (deep.size() + 6 <= 4096) deep += ".a";
  ExpectError("[cpu]\n" + deep + " = 1\n", "unknown key 'cpu.a'");
  EXPECT_TRUE(Parse("").ok());  // an empty file is a valid one
}

TEST(ConfigFile, ParsesValuesAndRecordsTheLine) {
  absl::flat_hash_map<std::string, ConfigEntry> out;
  const std::string path = "ok.toml";
  const std::string text = "# comment\n[cpu]\nthreads = 3\n[cache]\nenabled = false\ndir = \"/x\"\n";
  ASSERT_TRUE(ParseConfig(path, text, /*project_file=*/false, &out).ok());
  EXPECT_EQ(std::get<int64_t>(out["cpu.threads"].value), 3);
  EXPECT_EQ(out["cpu.threads"].source, path + ":3");
  EXPECT_EQ(std::get<bool>(out["cache.enabled"].value), false);
  EXPECT_EQ(std::get<std::string>(out["cache.dir"].value), "/x");
}

// Each layer overrides the one before; the reported source follows the winner.
TEST(Config, LayersInOrder) {
  const std::string dir = TempDir() + "/layers";
  ASSERT_EQ(system(("mkdir -p " + dir + "/xdg/bnb " + dir + "/project").c_str()), 0);
  WriteFile("layers/xdg/bnb/config.toml", "[cpu]\nthreads = 1\ngrain_elements = 2048\nisa = \"best\"\n");
  WriteFile("layers/project/bnb.toml", "[cpu]\nthreads = 2\ngrain_elements = 4096\n");
  const std::string explicit_file = WriteFile("layers/explicit.toml", "[cpu]\nthreads = 3\n");
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", (dir + "/xdg").c_str(), 1), 0);
  ASSERT_EQ(chdir((dir + "/project").c_str()), 0);
  unsetenv("BNB_CONFIG");
  unsetenv("BNB_CPU_THREADS");
  Config& c = Config::Global();
  c.ResetRuntime();

  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(*c.GetInt("cpu.threads"), 2);
  EXPECT_EQ(c.Get("cpu.threads")->source, "bnb.toml:2");
  EXPECT_EQ(*c.GetInt("cpu.grain_elements"), 4096);
  EXPECT_EQ(c.Get("cpu.isa")->source, dir + "/xdg/bnb/config.toml:4");
  EXPECT_EQ(c.Get("cache.enabled")->source, "default");

  setenv("BNB_CONFIG", explicit_file.c_str(), 1);
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(*c.GetInt("cpu.threads"), 3);

  setenv("BNB_CPU_THREADS", "4", 1);
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(*c.GetInt("cpu.threads"), 4);
  EXPECT_EQ(c.Get("cpu.threads")->source, "env BNB_CPU_THREADS");

  ASSERT_TRUE(c.Set("cpu.threads", int64_t{5}).ok());
  EXPECT_EQ(*c.GetInt("cpu.threads"), 5);
  ASSERT_TRUE(c.Reload().ok());  // run-time values survive a reload
  EXPECT_EQ(*c.GetInt("cpu.threads"), 5);
  ASSERT_TRUE(c.Unset("cpu.threads").ok());
  EXPECT_EQ(*c.GetInt("cpu.threads"), 4);

  setenv("BNB_CPU_THREADS", "lots", 1);
  absl::Status st = c.Reload();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("BNB_CPU_THREADS"), absl::string_view::npos) << st;
  EXPECT_EQ(*c.GetInt("cpu.threads"), 4);  // a failed reload keeps the previous values

  setenv("BNB_CONFIG", (dir + "/missing.toml").c_str(), 1);
  EXPECT_FALSE(c.Reload().ok());
  unsetenv("BNB_CONFIG");
  unsetenv("BNB_CPU_THREADS");
}

TEST(Config, SetValidates) {
  Config& c = Config::Global();
  EXPECT_FALSE(c.Set("cpu.threads", int64_t{-1}).ok());
  EXPECT_FALSE(c.Set("cpu.threads", std::string("2")).ok());
  EXPECT_FALSE(c.Set("cpu.nope", int64_t{1}).ok());
  const uint64_t g = c.generation();
  ASSERT_TRUE(c.Set("cpu.grain_elements", int64_t{1 << 20}).ok());
  EXPECT_NE(c.generation(), g);
  c.ResetRuntime();
}

// Each test in a directory of its own (dir_/project the working directory, dir_/xdg the user's config home), with
// no BNB_* knob variable or BNB_CONFIG, and the process-wide warnings captured. A fresh Config (not the global
// one) reads the files at its first use, as a new process does.
class ConfigTrustTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" + testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "/xdg/bnb' '" + dir_ + "/project'").c_str()), 0);
    ASSERT_EQ(chdir((dir_ + "/project").c_str()), 0);
    setenv("XDG_CONFIG_HOME", (dir_ + "/xdg").c_str(), 1);
    ClearEnv();
    warnings_.emplace();
  }
  void TearDown() override {
    warnings_.reset();
    ClearEnv();
  }
  static void ClearEnv() {
    unsetenv("BNB_CONFIG");
    for (const KnobSpec& k : AllKnobs()) unsetenv(KnobEnvName(k.name).c_str());
  }
  // Writes dir_/<rel> with exactly `mode`; returns its path.
  std::string Write(const std::string& rel, const std::string& text, mode_t mode = 0644) {
    const std::string path = dir_ + "/" + rel;
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
    return path;
  }
  // How many warnings hold `fragment`.
  int Warned(const std::string& fragment) { return warnings_->Count(fragment); }
  std::string AllWarnings() { return warnings_->All(); }

  std::string dir_;
  std::optional<tests::CapturedWarnings> warnings_;
};

#define EXPECT_HAS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << "wanted: " << (fragment) << "\nin: " << (text)

// Whoever else may write a config file could choose what bnb does: such a file is not read, with one warning.
TEST_F(ConfigTrustTest, GroupOrOtherWritableFilesAreNotRead) {
  const std::string project = Write("project/bnb.toml", "[cpu]\nthreads = 2\n", 0664);
  const std::string user = Write("xdg/bnb/config.toml", "[cpu]\ngrain_elements = 2048\n", 0606);
  Config c;
  EXPECT_EQ(c.Get("cpu.threads")->source, "default");
  EXPECT_EQ(c.Get("cpu.grain_elements")->source, "default");
  EXPECT_EQ(Warned("config file " + project + " is writable by group or others (mode 0664): it is not read"), 1)
      << AllWarnings();
  EXPECT_EQ(Warned("config file " + user + " is writable by group or others (mode 0606)"), 1) << AllWarnings();
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(Warned(project), 1) << "once per file and process";
  ASSERT_EQ(chmod(project.c_str(), 0644), 0);
  ASSERT_EQ(chmod(user.c_str(), 0600), 0);
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(*c.GetInt("cpu.threads"), 2);
  EXPECT_EQ(*c.GetInt("cpu.grain_elements"), 2048);
}

// A FIFO would block its reader until someone writes to it; a directory or an unreadable file is no config. Each
// is passed over with a warning, wherever it is (user file, project file, BNB_CONFIG), and CPU work goes on.
TEST_F(ConfigTrustTest, NoRegularFileIsWaitedOnOrFailsCpuWork) {
  alarm(60);  // a blocking open would hang here: die loudly instead
  ASSERT_EQ(mkdir((dir_ + "/xdg/bnb/config.toml").c_str(), 0700), 0);
  ASSERT_EQ(mkfifo((dir_ + "/project/bnb.toml").c_str(), 0600), 0);
  const std::string loop = dir_ + "/loop.toml";
  ASSERT_EQ(symlink(loop.c_str(), loop.c_str()), 0);  // cannot be opened (ELOOP), as root too
  setenv("BNB_CONFIG", loop.c_str(), 1);
  Config c;
  ASSERT_TRUE(c.Get("cpu.threads").ok());
  EXPECT_TRUE(c.FailingProblem().ok());
  EXPECT_EQ(Warned("config file " + dir_ + "/xdg/bnb/config.toml is a directory, not a regular file"), 1)
      << AllWarnings();
  EXPECT_EQ(Warned("config file " + dir_ + "/project/bnb.toml is a FIFO, not a regular file: it is not read"), 1)
      << AllWarnings();
  EXPECT_EQ(Warned("config file " + loop + " cannot be opened: Too many levels of symbolic links (errno 40): it is "
                   "not read (though BNB_CONFIG names it;"), 1) << AllWarnings();
  EXPECT_TRUE(c.Reload().ok());
  if (geteuid() != 0) {  // root reads a file of mode 0000 all the same
    ASSERT_EQ(mkdir((dir_ + "/other").c_str(), 0700), 0);
    const std::string locked = Write("other/bnb.toml", "[cpu]\nthreads = 2\n", 0000);
    ASSERT_EQ(chdir((dir_ + "/other").c_str()), 0);
    Config d;
    EXPECT_EQ(*d.GetInt("cpu.threads"), 0);
    EXPECT_EQ(Warned("config file " + locked + " cannot be opened: Permission denied"), 1) << AllWarnings();
  }
  alarm(0);
}

// Whoever can write the working directory must not choose the library bnb loads: a project's bnb.toml cannot set
// cuda.nvrtc_path (the rest of it applies); the user's own file, BNB_CONFIG, the environment and Set() can.
TEST_F(ConfigTrustTest, ProjectFileCannotNameCodeToLoad) {
  ASSERT_TRUE(FindKnob("cuda.nvrtc_path")->loads_code);
  const std::string user = Write("xdg/bnb/config.toml", "[cuda]\nnvrtc_path = \"/opt/cuda/libnvrtc.so.12\"\n");
  Write("project/bnb.toml", "[cpu]\nthreads = 2\n[cuda]\nnvrtc_path = \"/tmp/evil/libnvrtc.so.12\"\n");
  Config c;
  EXPECT_EQ(*c.GetString("cuda.nvrtc_path"), "/opt/cuda/libnvrtc.so.12");
  EXPECT_EQ(c.Get("cuda.nvrtc_path")->source,
            user + ":2 (bnb.toml:4 ignored: a project file may not name code to load)");
  EXPECT_EQ(*c.GetInt("cpu.threads"), 2);
  EXPECT_EQ(Warned("bnb.toml:4: cuda.nvrtc_path is ignored: it names code to load, which a project's bnb.toml may "
                   "not choose"), 1) << AllWarnings();
  EXPECT_EQ(Warned("BNB_CUDA_NVRTC_PATH"), 1) << "the warning says where it may be set";

  const std::string explicit_file = Write("explicit.toml", "[cuda]\nnvrtc_path = \"/opt/x/libnvrtc.so.13\"\n");
  setenv("BNB_CONFIG", explicit_file.c_str(), 1);
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(*c.GetString("cuda.nvrtc_path"), "/opt/x/libnvrtc.so.13");
  setenv("BNB_CUDA_NVRTC_PATH", "/opt/y/libnvrtc.so.13", 1);
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(c.Get("cuda.nvrtc_path")->source, "env BNB_CUDA_NVRTC_PATH");
  ASSERT_TRUE(c.Set("cuda.nvrtc_path", std::string("/opt/z/libnvrtc.so.13")).ok());
  EXPECT_EQ(*c.GetString("cuda.nvrtc_path"), "/opt/z/libnvrtc.so.13");
}

// The user's own config may name code to load: it must not be found relative to the working directory, which a
// relative HOME would make it (XDG_CONFIG_HOME is set by the fixture: unset here).
TEST_F(ConfigTrustTest, ARelativeHomeHoldsNoUserConfig) {
  const char* home = std::getenv("HOME");
  const std::string saved = home ? home : "";
  unsetenv("XDG_CONFIG_HOME");
  setenv("HOME", "home", 1);
  ASSERT_EQ(system("mkdir -p home/.config/bnb"), 0);
  Write("project/home/.config/bnb/config.toml", "[cuda]\nnvrtc_path = \"/tmp/evil/libnvrtc.so.12\"\n");
  Config c;
  EXPECT_EQ(*c.GetString("cuda.nvrtc_path"), "");
  EXPECT_EQ(XdgBnbDir("XDG_CONFIG_HOME", ".config"), "");
  home ? setenv("HOME", saved.c_str(), 1) : unsetenv("HOME");
}

// A bare name would be looked up on the loader's path (and a relative one in the working directory).
TEST_F(ConfigTrustTest, LibraryPathMustBeAbsolute) {
  Config c;
  absl::Status st = c.Set("cuda.nvrtc_path", std::string("libnvrtc.so.12"));
  EXPECT_EQ(st.message(), "cuda.nvrtc_path: expected an absolute path (~ is not expanded), got 'libnvrtc.so.12'");
  Write("xdg/bnb/config.toml", "[cuda]\nnvrtc_path = \"lib/libnvrtc.so\"\n");
  Config d;
  EXPECT_EQ(*d.GetString("cuda.nvrtc_path"), "") << "the default, as the setting is broken";
  EXPECT_HAS(d.SettingStatus("cuda.nvrtc_path").message(),
             "config.toml:2:14: cuda.nvrtc_path: expected an absolute path (~ is not expanded), got 'lib/libnvrtc.so'");
  EXPECT_EQ(Warned("got 'lib/libnvrtc.so'; cuda.nvrtc_path keeps its default"), 1) << AllWarnings();
}

// A broken cache or CUDA setting must not stop CPU work, which never reads it: a warning, and the default.
TEST_F(ConfigTrustTest, BrokenCacheOrCudaSettingsWarnAndKeepDefaults) {
  setenv("BNB_CACHE_DIR", "rel/kernels", 1);
  setenv("BNB_CACHE_ENABLED", "maybe", 1);
  setenv("BNB_CUDA_THREADS_PER_BLOCK", "48", 1);
  Write("project/bnb.toml", "[cpu]\nthreads = 3\n");
  Config c;
  EXPECT_EQ(*c.GetInt("cpu.threads"), 3);
  EXPECT_TRUE(c.FailingProblem().ok());
  ASSERT_TRUE(c.Effective().ok());
  EXPECT_EQ(*c.GetBool("cache.enabled"), true);
  EXPECT_EQ(*c.GetString("cache.dir"), "");
  EXPECT_EQ(*c.GetInt("cuda.threads_per_block"), 0);
  EXPECT_EQ(c.Get("cache.enabled")->source,
            "default (ignored: environment variable BNB_CACHE_ENABLED: cache.enabled: expected true/false (or 1/0, "
            "yes/no), got \"maybe\")");
  EXPECT_EQ(Warned("environment variable BNB_CACHE_ENABLED: cache.enabled: expected true/false (or 1/0, yes/no), "
                   "got \"maybe\"; cache.enabled keeps its default, true"), 1) << AllWarnings();
  EXPECT_EQ(Warned("BNB_CACHE_DIR: cache.dir: expected an absolute path (~ is not expanded), got 'rel/kernels'"), 1);
  EXPECT_EQ(Warned("BNB_CUDA_THREADS_PER_BLOCK: cuda.threads_per_block: expected 0 or a power of two"), 1);
  // What must not act on the default in the setting's place (`cache clear`) sees the problem.
  EXPECT_HAS(c.SettingStatus("cache.dir").message(), "got 'rel/kernels'");
  // An explicit reload reports every problem, and keeps the values in force.
  absl::Status st = c.Reload();
  EXPECT_HAS(st.message(), "BNB_CACHE_DIR");
  EXPECT_HAS(st.message(), "BNB_CACHE_ENABLED");
  EXPECT_HAS(st.message(), "BNB_CUDA_THREADS_PER_BLOCK");
  // A value set at run time is in force, with no problem to report.
  ASSERT_TRUE(c.Set("cache.enabled", false).ok());
  EXPECT_EQ(*c.GetBool("cache.enabled"), false);
  EXPECT_TRUE(c.SettingStatus("cache.enabled").ok());
  EXPECT_EQ(Warned("cache.enabled keeps its default"), 1) << "once";
}

// A broken cpu setting fails CPU work as before, whichever cpu knob and whatever else is set.
TEST_F(ConfigTrustTest, BrokenCpuSettingsStillFail) {
  setenv("BNB_CPU_HUGE_PAGES", "maybe", 1);
  Config c;
  EXPECT_TRUE(c.Get("cpu.threads").ok()) << "each knob's read fails only for its own problem";
  EXPECT_HAS(c.Get("cpu.huge_pages").status().message(), "environment variable BNB_CPU_HUGE_PAGES: cpu.huge_pages");
  EXPECT_HAS(c.FailingProblem().message(), "BNB_CPU_HUGE_PAGES");
  EXPECT_FALSE(c.Effective().ok());
  EXPECT_EQ(Warned("BNB_CPU_HUGE_PAGES"), 0) << "an error, not a warning";
  unsetenv("BNB_CPU_HUGE_PAGES");
  // The first broken setting of a knob stands: a later layer's value does not hide it.
  Write("project/bnb.toml", "[cpu]\nthreads = \"x\"\n");
  setenv("BNB_CPU_THREADS", "2", 1);
  Config d;
  EXPECT_HAS(d.Get("cpu.threads").status().message(), "bnb.toml:2:11: cpu.threads: expected an integer, got 'x'");
}

// A file that does not parse cannot say which knobs it meant: every read fails, naming file and line. A bad value
// in a file is its knob's problem only.
TEST_F(ConfigTrustTest, ASyntaxErrorFailsEveryReadABadValueOnlyItsKnob) {
  Write("project/bnb.toml", "[cpu\nthreads = 1\n");
  Config c;
  EXPECT_HAS(c.Get("cpu.threads").status().message(), "bnb.toml:1:");
  EXPECT_HAS(c.Get("cache.dir").status().message(), "bnb.toml:1:");
  EXPECT_FALSE(c.FailingProblem().ok());
  Write("project/bnb.toml", "[cache]\nenabled = 1\n[cpu]\nthreads = 2\n");
  Config d;
  EXPECT_EQ(*d.GetInt("cpu.threads"), 2);
  EXPECT_EQ(*d.GetBool("cache.enabled"), true);
  EXPECT_EQ(Warned("bnb.toml:2:11: cache.enabled: expected a boolean, got 1; cache.enabled keeps its default"), 1)
      << AllWarnings();
}

}  // namespace
}  // namespace bnb::core
