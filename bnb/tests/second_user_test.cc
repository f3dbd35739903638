// What another user can do to bnb, shown with a real second user (useradd): config files they own or may write,
// a project file naming the library to load, a relative library path, and kernel cache directories they control
// (owned by them, or reached through their symlink). Giving files to another user needs root outside a user
// namespace, so this target runs outside Bazel's sandbox; it skips, saying why, where that cannot be set up.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bnb/core/config.h"
#include "bnb/tests/captured_warnings.h"
#include "bnb/jit/cuda/nvrtc.h"
#include "bnb/jit/disk_cache.h"
#include "gtest/gtest.h"

namespace bnb {
namespace {

// A fixed name, made once and then reused: concurrent and later runs share it.
constexpr char kOtherUser[] = "bnb-test-other";

// The second user's uid; nullopt with *why where there can be none here.
std::optional<uid_t> OtherUser(const std::string& probe_file, std::string* why) {
  if (geteuid() != 0) {
    *why = "not running as root, so files cannot be given to another user";
    return std::nullopt;
  }
  if (getpwnam(kOtherUser) == nullptr) {
    if (std::system("command -v useradd >/dev/null 2>&1") != 0) {
      *why = "useradd is not installed";
      return std::nullopt;
    }
    const int rc = std::system(
        (std::string("useradd --system --no-create-home --shell /usr/sbin/nologin ") + kOtherUser + " 2>&1").c_str());
    if (getpwnam(kOtherUser) == nullptr) {  // a concurrent run may have made it meanwhile
      *why = "useradd " + std::string(kOtherUser) + " failed (status " + std::to_string(rc) + ")";
      return std::nullopt;
    }
  }
  const uid_t uid = getpwnam(kOtherUser)->pw_uid;
  std::ofstream(probe_file) << "probe";
  if (chown(probe_file.c_str(), uid, static_cast<gid_t>(-1)) != 0) {
    *why = "root in a user namespace (as in Bazel's sandbox): chown to another user fails";
    return std::nullopt;
  }
  unlink(probe_file.c_str());
  return uid;
}

class SecondUserTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "/xdg/bnb'").c_str()), 0);
    std::string why;
    std::optional<uid_t> uid = OtherUser(dir_ + "/probe", &why);
    if (!uid) GTEST_SKIP() << why;
    other_ = *uid;
    setenv("XDG_CONFIG_HOME", (dir_ + "/xdg").c_str(), 1);
    ClearEnv();
    warnings_.emplace();
  }
  void TearDown() override {
    if (other_ == 0) return;  // skipped before anything was changed
    warnings_.reset();
    ClearEnv();
  }
  static void ClearEnv() {
    unsetenv("BNB_CONFIG");
    for (const core::KnobSpec& k : core::AllKnobs()) unsetenv(core::KnobEnvName(k.name).c_str());
  }
  std::string Write(const std::string& path, const std::string& text, mode_t mode, uid_t owner) {
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
    EXPECT_EQ(chown(path.c_str(), owner, static_cast<gid_t>(-1)), 0) << path;
    return path;
  }
  std::string MakeDir(const std::string& path, mode_t mode, uid_t owner) {
    EXPECT_EQ(mkdir(path.c_str(), 0700), 0) << path;
    EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
    EXPECT_EQ(lchown(path.c_str(), owner, static_cast<gid_t>(-1)), 0) << path;
    return path;
  }
  int Warned(const std::string& fragment) { return warnings_->Count(fragment); }
  std::string AllWarnings() { return warnings_->All(); }
  std::string Uid(uid_t u) { return std::to_string(u); }

  std::string dir_;
  uid_t other_ = 0;
  std::optional<tests::CapturedWarnings> warnings_;
};

// A shared working directory (mode 1777, as /tmp) where the other user may leave a bnb.toml.
TEST_F(SecondUserTest, ConfigFilesTheyControlOrThatNameCodeAreRefused) {
  const std::string shared = MakeDir(dir_ + "/shared", 01777, 0);
  ASSERT_EQ(chdir(shared.c_str()), 0);
  const std::string evil = "[cpu]\nthreads = 2\n[cuda]\nnvrtc_path = \"" + shared + "/evil/libnvrtc.so.12\"\n";
  const std::string project = shared + "/bnb.toml";

  // Theirs: not read at all.
  Write(project, evil, 0644, other_);
  core::Config theirs;
  EXPECT_EQ(theirs.Get("cpu.threads")->source, "default");
  EXPECT_EQ(*theirs.GetString("cuda.nvrtc_path"), "");
  EXPECT_EQ(Warned("config file " + project + " is owned by uid " + Uid(other_) +
                   ", not by the current user (uid 0): it is not read"), 1) << AllWarnings();

  // Ours, but anyone may write it: not read either (a fresh name, as the warning comes once per file).
  const std::string writable = shared + "/writable";
  ASSERT_EQ(mkdir(writable.c_str(), 0755), 0);
  ASSERT_EQ(chdir(writable.c_str()), 0);
  Write(writable + "/bnb.toml", evil, 0666, 0);
  core::Config anyones;
  EXPECT_EQ(anyones.Get("cpu.threads")->source, "default");
  EXPECT_EQ(Warned("config file " + writable + "/bnb.toml is writable by group or others (mode 0666)"), 1)
      << AllWarnings();

  // Ours and only ours: read, but the library it names is not taken, nor tried when NVRTC is opened.
  ASSERT_EQ(chmod((writable + "/bnb.toml").c_str(), 0644), 0);
  ASSERT_TRUE(core::Config::Global().Reload().ok());
  EXPECT_EQ(*core::Config::Global().GetInt("cpu.threads"), 2);
  EXPECT_EQ(*core::Config::Global().GetString("cuda.nvrtc_path"), "");
  EXPECT_EQ(Warned("bnb.toml:4: cuda.nvrtc_path is ignored: it names code to load"), 1) << AllWarnings();
  absl::StatusOr<const jit::cuda::Nvrtc*> nvrtc = jit::cuda::GetNvrtc();
  const std::string opened = nvrtc.ok() ? (*nvrtc)->path : std::string(nvrtc.status().message());
  EXPECT_EQ(opened.find(shared + "/evil"), std::string::npos) << opened;

  // A relative library path, from the environment: a warning, and the default search.
  setenv("BNB_CUDA_NVRTC_PATH", "evil/libnvrtc.so.12", 1);
  core::Config relative;
  EXPECT_EQ(*relative.GetString("cuda.nvrtc_path"), "");
  EXPECT_EQ(Warned("environment variable BNB_CUDA_NVRTC_PATH: cuda.nvrtc_path: expected an absolute path (~ is not "
                   "expanded), got 'evil/libnvrtc.so.12'; cuda.nvrtc_path keeps its default"), 1) << AllWarnings();

  // Their file as the user's config or as BNB_CONFIG: refused as well.
  unsetenv("BNB_CUDA_NVRTC_PATH");
  const std::string user = Write(dir_ + "/xdg/bnb/config.toml", "[cpu]\nthreads = 3\n", 0644, other_);
  const std::string named = Write(dir_ + "/named.toml", "[cpu]\nthreads = 4\n", 0644, other_);
  setenv("BNB_CONFIG", named.c_str(), 1);
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  core::Config others;
  EXPECT_EQ(others.Get("cpu.threads")->source, "default");
  EXPECT_EQ(Warned("config file " + user + " is owned by uid " + Uid(other_)), 1) << AllWarnings();
  EXPECT_EQ(Warned("config file " + named + " is owned by uid " + Uid(other_)), 1) << AllWarnings();
}

// Kernel cache directories: one they own on the way, their symlink in a directory all may write (sticky, as
// /tmp), and the cache directory itself theirs. The same layout with our own link is used.
TEST_F(SecondUserTest, CacheDirsTheyControlAreNotUsed) {
  std::vector<std::string> warned;
  const auto options = [&](const std::string& d) {
    return jit::DiskCacheOptions{d, true, [&warned](const std::string& m) { warned.push_back(m); }};
  };
  const std::string theirs = MakeDir(dir_ + "/theirs", 0755, other_);
  jit::DiskCache on_the_way(options(theirs + "/bnb/kernels"));
  EXPECT_EQ(on_the_way.dir(), "");
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find(theirs + " (for " + theirs + "/bnb/kernels) is owned by uid " + Uid(other_) +
                           ", not by the current user (uid 0) or root"), std::string::npos) << warned[0];

  const std::string tmp = MakeDir(dir_ + "/tmp", 01777, 0);
  const std::string real = MakeDir(dir_ + "/real", 0700, 0);
  ASSERT_EQ(symlink(real.c_str(), (tmp + "/bnb").c_str()), 0);
  ASSERT_EQ(lchown((tmp + "/bnb").c_str(), other_, static_cast<gid_t>(-1)), 0);
  const char* saved = std::getenv("XDG_CACHE_HOME");
  const std::string saved_value = saved ? saved : "";
  setenv("XDG_CACHE_HOME", tmp.c_str(), 1);
  jit::DiskCache planted(options(""));
  const std::string planted_dir = planted.dir();
  ASSERT_EQ(unlink((tmp + "/bnb").c_str()), 0);
  ASSERT_EQ(symlink(real.c_str(), (tmp + "/bnb").c_str()), 0);  // the same link, ours
  jit::DiskCache own_link(options(""));
  const std::string own_dir = own_link.dir();
  saved ? setenv("XDG_CACHE_HOME", saved_value.c_str(), 1) : unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(planted_dir, "");
  ASSERT_EQ(warned.size(), 2u);
  EXPECT_NE(warned[1].find(tmp + "/bnb (for " + tmp + "/bnb/kernels) is a symbolic link owned by uid " +
                           Uid(other_)), std::string::npos) << warned[1];
  EXPECT_EQ(own_dir, tmp + "/bnb/kernels");
  EXPECT_EQ(warned.size(), 2u) << warned.back();

  const std::string mine = MakeDir(dir_ + "/mine", 0700, 0);
  MakeDir(mine + "/kernels", 0700, other_);
  jit::DiskCache owned(options(mine + "/kernels"));
  EXPECT_EQ(owned.dir(), "");
  ASSERT_EQ(warned.size(), 3u);
  EXPECT_NE(warned[2].find(mine + "/kernels is owned by uid " + Uid(other_) + ", not by the current user (uid 0)"),
            std::string::npos) << warned[2];
}

}  // namespace
}  // namespace bnb
