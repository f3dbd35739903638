// The TOML parser's errors, and the layering order of Config.
#include "bnb/core/config.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

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

absl::Status Parse(const std::string& text) {
  absl::flat_hash_map<std::string, ConfigEntry> out;
  return ParseConfigFile(WriteFile("parse.toml", text), &out);
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
  const std::string path = WriteFile("ok.toml", "# comment\n[cpu]\nthreads = 3\n[cache]\nenabled = false\ndir = \"/x\"\n");
  ASSERT_TRUE(ParseConfigFile(path, &out).ok());
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

}  // namespace
}  // namespace bnb::core
