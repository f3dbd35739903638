// The kernel cache with a fake compiler: disk round trip, damaged files (each a miss, recompiled and replaced),
// concurrent writers (processes) and compilers (threads), unsafe directories and files, stats, list/clear/warm.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bnb/core/config.h"
#include "bnb/jit/disk_cache.h"
#include "bnb/jit/fake_compiler.h"
#include "bnb/jit/kernel_cache.h"
#include "gtest/gtest.h"

namespace bnb::jit {
namespace {

constexpr uid_t kNobody = 65534;

KernelSpec Spec(const std::string& blocksize = "256") {
  KernelSpec s;
  s.template_name = "blockwise8";
  s.entry = "quantize_blockwise8";
  s.template_args = {{"T", "float"}, {"BLOCKSIZE", blocksize}, {"THREADS", "256"}};
  s.arch = "sm_90";
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

class JitCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
    root_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + info->test_suite_name() + "." + info->name();
    dir_ = root_ + "/kernels";
    RemoveRoot();
    fake_ = std::make_shared<FakeCompiler>();
  }
  void TearDown() override {
    chmod(dir_.c_str(), 0700);
    RemoveRoot();
  }
  void RemoveRoot() const {
    std::error_code ignored;  // absent the first time
    std::filesystem::remove_all(root_, ignored);
  }

  std::unique_ptr<KernelCache> NewCache(bool enabled = true, int64_t owner_uid = -1) {
    WarningSink sink = [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      warnings_.push_back(m);
    };
    return std::make_unique<KernelCache>(
        KernelCacheOptions{fake_, DiskCacheOptions{dir_, enabled, sink, owner_uid}, nullptr});
  }
  // True when this process can give a file to another user (root outside a user namespace).
  bool CanChown(const std::string& path) { return geteuid() == 0 && chown(path.c_str(), kNobody, kNobody) == 0; }
  std::vector<std::string> Warnings() {
    std::lock_guard<std::mutex> lock(mu_);
    return warnings_;
  }
  bool Warned(const std::string& fragment) {
    for (const std::string& w : Warnings()) {
      if (w.find(fragment) != std::string::npos) return true;
    }
    return false;
  }
  std::string KeyPath(KernelCache& c, const KernelSpec& s) { return dir_ + "/" + *c.Key(s) + kCacheFileSuffix; }

  std::string root_, dir_;
  std::shared_ptr<FakeCompiler> fake_;
  std::mutex mu_;
  std::vector<std::string> warnings_;
};

TEST_F(JitCacheTest, RoundTripAcrossProcesses) {
  auto a = NewCache();
  auto b1 = a->GetBinary(Spec());
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(fake_->calls, 1);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const std::string path = KeyPath(*a, Spec());
  ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto fresh = NewCache();  // as a new process would
  auto b2 = fresh->GetBinary(Spec());
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(fake_->calls, 1);
  EXPECT_EQ((*b2)->image, (*b1)->image);
  EXPECT_EQ((*b2)->lowered_name, "fake_quantize_blockwise8");
  EXPECT_EQ((*b2)->kind, BinaryKind::kCubin);
  const Stats s = fresh->GetStats();
  EXPECT_EQ(s.disk_hits, 1);
  EXPECT_EQ(s.compiles, 0);
  EXPECT_TRUE(Warnings().empty());
}

TEST_F(JitCacheTest, EncodeDecode) {
  Binary b{BinaryKind::kPtx, "_Z3fooi", std::string("ptx text\0", 9)};
  const std::string key(64, 'a');
  const std::string bytes = EncodeCacheFile(key, b);
  EXPECT_EQ(bytes.size(), kCacheHeaderSize + 1 + 4 + 7 + 9);
  auto d = DecodeCacheFile(key, bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, BinaryKind::kPtx);
  EXPECT_EQ(d->lowered_name, "_Z3fooi");
  EXPECT_EQ(d->image, b.image);
  EXPECT_FALSE(DecodeCacheFile(std::string(64, 'b'), bytes).ok());  // stored under another key
  // Every single flipped byte is caught.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_FALSE(DecodeCacheFile(key, bad).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(DecodeCacheFile(key, bytes.substr(0, n)).ok()) << n;
}

// Each kind of damage: a miss with one warning, then a compile, then the file is replaced by a good one.
struct Damage {
  const char* name;
  std::string (*apply)(std::string);
  const char* warning;
};

TEST_F(JitCacheTest, DamagedFilesAreRecompiledAndReplaced) {
  const Damage damages[] = {
      {"truncated", [](std::string b) { return b.substr(0, b.size() - 10); }, "payload length"},
      {"truncated header", [](std::string b) { return b.substr(0, 20); }, "shorter than"},
      {"empty", [](std::string) { return std::string(); }, "shorter than"},
      {"flipped payload byte", [](std::string b) { b[b.size() - 3] ^= 0x40; return b; }, "checksum"},
      {"flipped checksum byte", [](std::string b) { b[100] ^= 0x01; return b; }, "checksum"},
      {"wrong format version", [](std::string b) { b[8] = static_cast<char>(kCacheFormatVersion + 1); return b; },
       "format version"},
      {"wrong magic", [](std::string b) { b[0] = 'X'; return b; }, "magic"},
      {"appended garbage", [](std::string b) { return b + "xyz"; }, "payload length"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    warnings_.clear();
    fake_->calls = 0;
    auto first = NewCache();
    ASSERT_TRUE(first->GetBinary(Spec()).ok());
    const std::string path = KeyPath(*first, Spec());
    const std::string good = ReadFile(path);
    ASSERT_FALSE(good.empty());
    WriteFile(path, d.apply(good));
    chmod(path.c_str(), 0600);

    auto second = NewCache();
    auto b = second->GetBinary(Spec());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(fake_->calls, 2) << "the damaged file must not count as a hit";
    EXPECT_EQ(second->GetStats().compiles, 1);
    EXPECT_EQ(second->GetStats().disk_hits, 0);
    EXPECT_TRUE(Warned(d.warning)) << "warnings: " << (Warnings().empty() ? "none" : Warnings()[0]);
    EXPECT_EQ(ReadFile(path), good) << "the file is replaced by a good one";
    std::remove(path.c_str());
  }
}

TEST_F(JitCacheTest, EightProcessesWriteTheSameKey) {
  auto probe = NewCache();
  const std::string path = KeyPath(*probe, Spec());
  fake_->sleep_ms = 50;  // the writers overlap
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto cache = NewCache();
      auto b = cache->GetBinary(Spec());
      _exit(b.ok() && (*b)->lowered_name == "fake_quantize_blockwise8" ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed, status " << status;
  }
  const std::vector<std::string> entries = DirEntries(dir_);
  ASSERT_EQ(entries.size(), 1u) << "no temp files may be left behind";
  EXPECT_EQ(dir_ + "/" + entries[0], path);
  auto decoded = DecodeCacheFile(*probe->Key(Spec()), ReadFile(path));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto reader = NewCache();
  ASSERT_TRUE(reader->GetBinary(Spec()).ok());
  EXPECT_EQ(reader->GetStats().disk_hits, 1);
}

TEST_F(JitCacheTest, EightThreadsOneCompile) {
  fake_->sleep_ms = 100;
  auto cache = NewCache();
  std::vector<std::thread> threads;
  std::vector<std::string> images(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto b = cache->GetBinary(Spec());
      if (b.ok()) images[i] = (*b)->image;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fake_->calls, 1);
  const Stats s = cache->GetStats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.memory_hits, 7);
  EXPECT_GE(s.compile_ms, 100.0);
  for (const std::string& img : images) EXPECT_EQ(img, images[0]);
  EXPECT_FALSE(images[0].empty());
}

TEST_F(JitCacheTest, DifferentKeysCompileSeparately) {
  auto cache = NewCache();
  ASSERT_TRUE(cache->GetBinary(Spec("64")).ok());
  ASSERT_TRUE(cache->GetBinary(Spec("128")).ok());
  ASSERT_TRUE(cache->GetBinary(Spec("64")).ok());
  const Stats s = cache->GetStats();
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.memory_hits, 1);
  EXPECT_EQ(s.disk_hits, 0);
  auto files = cache->ListDisk();
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  for (const CacheFileInfo& f : *files) {
    EXPECT_GT(f.size, static_cast<int64_t>(kCacheHeaderSize));
    EXPECT_GT(f.mtime, 0);
  }
  cache->ResetStats();
  EXPECT_EQ(cache->GetStats().memory_hits, 0);
  EXPECT_EQ(*cache->ClearDisk(), 2);
  EXPECT_TRUE(cache->ListDisk()->empty());
}

TEST_F(JitCacheTest, CompileErrorIsReturnedAndNotCached) {
  fake_->fail = true;
  auto cache = NewCache();
  auto b = cache->GetBinary(Spec());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("BLOCKSIZE=256"), absl::string_view::npos) << b.status();
  EXPECT_NE(b.status().message().find("-arch=sm_90"), absl::string_view::npos) << b.status();
  EXPECT_EQ(cache->GetStats().compile_failures, 1);
  EXPECT_TRUE(DirEntries(dir_).empty());
  fake_->fail = false;
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  EXPECT_EQ(cache->GetStats().compiles, 1);
}

TEST_F(JitCacheTest, DisabledCacheTouchesNoDisk) {
  auto cache = NewCache(/*enabled=*/false);
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  EXPECT_EQ(cache->GetStats().compiles, 1);
  EXPECT_EQ(cache->GetStats().memory_hits, 1);
  struct stat st;
  EXPECT_NE(stat(dir_.c_str(), &st), 0) << "no directory is created";
  EXPECT_TRUE(Warnings().empty());
  EXPECT_FALSE(cache->ListDisk().ok());
  EXPECT_EQ(cache->DiskDir(), "");
}

TEST_F(JitCacheTest, WorldWritableDirIsNotUsed) {
  ASSERT_EQ(std::system(("mkdir -p '" + dir_ + "'").c_str()), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  auto cache = NewCache();
  auto b = cache->GetBinary(Spec());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(Warned("writable by group or others")) << (Warnings().empty() ? "no warning" : Warnings()[0]);
  EXPECT_EQ(Warnings().size(), 1u);
  EXPECT_TRUE(DirEntries(dir_).empty()) << "nothing is written to an unsafe directory";
  // Later kernels are not stored either, and give no further warning.
  ASSERT_TRUE(cache->GetBinary(Spec("64")).ok());
  EXPECT_TRUE(DirEntries(dir_).empty());
  EXPECT_EQ(cache->GetStats().disk_hits, 0);
  EXPECT_EQ(Warnings().size(), 1u) << "the warning is given once";
}

TEST_F(JitCacheTest, DirOwnedByAnotherUserIsNotUsed) {
  ASSERT_EQ(std::system(("mkdir -p '" + dir_ + "'").c_str()), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  // Where this process cannot chown (not root, or root in a user namespace such as Bazel's sandbox), the cache is
  // told to expect another owner instead: the same check, seen from the other side.
  const bool chowned = CanChown(dir_);
  auto cache = chowned ? NewCache() : NewCache(true, static_cast<int64_t>(geteuid()) + 1);
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  EXPECT_TRUE(Warned("not by the current user")) << (Warnings().empty() ? "no warning" : Warnings()[0]);
  EXPECT_TRUE(DirEntries(dir_).empty());
  EXPECT_EQ(cache->GetStats().compiles, 1);
}

// A directory on the way that others may write (without the sticky bit) lets them swap what lies below it: the
// cache is refused, naming that directory, and nothing is created in it.
TEST_F(JitCacheTest, WorldWritableDirOnTheWayIsNotUsed) {
  const std::string shared = root_ + "/shared";
  ASSERT_EQ(std::system(("mkdir -p '" + shared + "'").c_str()), 0);
  ASSERT_EQ(chmod(shared.c_str(), 0777), 0);
  dir_ = shared + "/bnb/kernels";
  auto cache = NewCache();
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  EXPECT_TRUE(Warned(shared + " (for " + dir_ + ") is writable by group or others without the sticky bit (mode 0777)"))
      << (Warnings().empty() ? "no warning" : Warnings()[0]);
  EXPECT_EQ(Warnings().size(), 1u);
  EXPECT_TRUE(DirEntries(shared).empty()) << "nothing is created in it";
  EXPECT_EQ(cache->DiskDir(), "");
}

// The attack: XDG_CACHE_HOME in a directory others can write, where one of them planted bnb -> their directory.
TEST_F(JitCacheTest, PlantedSymlinkUnderAWritableXdgCacheHomeIsNotFollowed) {
  const std::string xdg = root_ + "/xdg", theirs = root_ + "/theirs";
  ASSERT_EQ(std::system(("mkdir -p '" + xdg + "' '" + theirs + "/kernels'").c_str()), 0);
  ASSERT_EQ(chmod(xdg.c_str(), 0777), 0);
  ASSERT_EQ(symlink(theirs.c_str(), (xdg + "/bnb").c_str()), 0);
  const char* saved = std::getenv("XDG_CACHE_HOME");
  const std::string saved_value = saved ? saved : "";
  setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
  dir_ = "";  // the default directory: $XDG_CACHE_HOME/bnb/kernels
  auto cache = NewCache();
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  saved ? setenv("XDG_CACHE_HOME", saved_value.c_str(), 1) : unsetenv("XDG_CACHE_HOME");
  EXPECT_TRUE(Warned(xdg + " (for " + xdg + "/bnb/kernels) is writable by group or others without the sticky bit"))
      << (Warnings().empty() ? "no warning" : Warnings()[0]);
  EXPECT_TRUE(DirEntries(theirs + "/kernels").empty()) << "nothing is written to their directory";
  EXPECT_EQ(cache->DiskDir(), "");
}

// What is everyday stays usable: a sticky world-writable directory on the way (a cache under /tmp), and a symlink
// of the user's own (a home reached through a link), whose target is checked in turn.
TEST_F(JitCacheTest, StickyDirsAndOwnSymlinksOnTheWayAreUsed) {
  const std::string sticky = root_ + "/tmp", real = root_ + "/real";
  ASSERT_EQ(std::system(("mkdir -p '" + sticky + "' '" + real + "'").c_str()), 0);
  ASSERT_EQ(chmod(sticky.c_str(), 01777), 0);
  ASSERT_EQ(symlink(real.c_str(), (sticky + "/link").c_str()), 0);
  dir_ = sticky + "/link/kernels";
  auto cache = NewCache();
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  EXPECT_TRUE(Warnings().empty()) << Warnings()[0];
  EXPECT_EQ(cache->DiskDir(), dir_);
  EXPECT_EQ(DirEntries(real + "/kernels").size(), 1u);
  // The link's target is checked as any path: one that others may write is refused.
  ASSERT_EQ(chmod(real.c_str(), 0777), 0);
  auto refused = NewCache();
  ASSERT_TRUE(refused->GetBinary(Spec("64")).ok());
  EXPECT_TRUE(Warned(real + " (for " + dir_ + ") is writable by group or others"))
      << (Warnings().empty() ? "no warning" : Warnings()[0]);
  EXPECT_EQ(refused->DiskDir(), "");
}

TEST_F(JitCacheTest, UnwritableDirWarnsAndCompiles) {
  if (geteuid() == 0) {
    GTEST_SKIP() << "running as root, whom mode 0500 does not stop from writing; the ownership and mode checks "
                    "are covered by DirOwnedByAnotherUserIsNotUsed and WorldWritableDirIsNotUsed";
  }
  ASSERT_EQ(std::system(("mkdir -p '" + dir_ + "'").c_str()), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0500), 0);
  auto cache = NewCache();
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  EXPECT_TRUE(Warned("not writable")) << (Warnings().empty() ? "no warning" : Warnings()[0]);
  EXPECT_TRUE(DirEntries(dir_).empty());
}

TEST_F(JitCacheTest, UnsafeFilesAreNotLoaded) {
  auto first = NewCache();
  ASSERT_TRUE(first->GetBinary(Spec()).ok());
  const std::string path = KeyPath(*first, Spec());

  // Group-writable file.
  ASSERT_EQ(chmod(path.c_str(), 0660), 0);
  auto second = NewCache();
  ASSERT_TRUE(second->GetBinary(Spec()).ok());
  EXPECT_EQ(second->GetStats().disk_hits, 0);
  EXPECT_EQ(second->GetStats().compiles, 1);
  EXPECT_TRUE(Warned("writable by group or others"));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "replaced by a safe file";

  // A symlink in place of the file.
  const std::string target = root_ + "/elsewhere";
  ASSERT_EQ(rename(path.c_str(), target.c_str()), 0);
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  auto third = NewCache();
  ASSERT_TRUE(third->GetBinary(Spec()).ok());
  EXPECT_EQ(third->GetStats().disk_hits, 0);
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the symlink is replaced by a regular file";

  if (CanChown(path)) {  // a file owned by another user
    auto fourth = NewCache();
    ASSERT_TRUE(fourth->GetBinary(Spec()).ok());
    EXPECT_EQ(fourth->GetStats().disk_hits, 0);
    EXPECT_TRUE(Warned("not by the current user"));
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid()) << "replaced by our own file";
  }
}

TEST_F(JitCacheTest, FifoUnderAKeyIsSkippedNotWaitedOn) {
  auto first = NewCache();
  ASSERT_TRUE(first->GetBinary(Spec()).ok());
  const std::string path = KeyPath(*first, Spec());
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto second = NewCache();  // opening a FIFO for reading without O_NONBLOCK waits for a writer: forever
  ASSERT_TRUE(second->GetBinary(Spec()).ok());
  EXPECT_EQ(second->GetStats().disk_hits, 0);
  EXPECT_TRUE(Warned("not a regular file"));
}

TEST_F(JitCacheTest, ClearRemovesOnlyCacheFiles) {
  auto cache = NewCache();
  ASSERT_TRUE(cache->GetBinary(Spec()).ok());
  const std::string key = *cache->Key(Spec());
  const std::string killed = dir_ + "/." + key + ".tmp.1.2.3";
  WriteFile(killed, "left by a killed writer");  // Store's temporary: ours
  const struct timeval old_times[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(utimes(killed.c_str(), old_times), 0);  // from 2001: not a store in progress
  const std::string in_progress = dir_ + "/." + key + ".tmp.4.5.6";
  WriteFile(in_progress, "being written");  // a store in progress: clear leaves it
  // A user's files that only look like ours, were cache.dir pointed at their directory.
  const std::vector<std::string> theirs = {"notes.bnbk", ".bashrc.tmp.orig", key.substr(1) + ".bnbk",
                                           key + ".bnbk.orig", "." + key + ".tmpx"};
  for (const std::string& name : theirs) WriteFile(dir_ + "/" + name, "mine");
  ASSERT_EQ(mkdir((dir_ + "/sub" + key + ".bnbk").c_str(), 0700), 0);
  auto files = cache->ListDisk();
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 3u);
  auto removed = cache->ClearDisk();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 2);
  std::vector<std::string> left = theirs;
  left.push_back("sub" + key + ".bnbk");
  left.push_back("." + key + ".tmp.4.5.6");
  std::sort(left.begin(), left.end());
  EXPECT_EQ(DirEntries(dir_), left);
}

TEST_F(JitCacheTest, FileOwnedByAnotherUserIsNotLoaded) {
  auto first = NewCache();
  ASSERT_TRUE(first->GetBinary(Spec()).ok());
  const std::string path = KeyPath(*first, Spec());
  if (!CanChown(path)) {
    // Seen from a cache that expects another owner, our directory is foreign too: nothing is loaded or written.
    auto other = NewCache(true, static_cast<int64_t>(geteuid()) + 1);
    ASSERT_TRUE(other->GetBinary(Spec()).ok());
    EXPECT_EQ(other->GetStats().disk_hits, 0);
    EXPECT_EQ(other->GetStats().compiles, 1);
    EXPECT_TRUE(Warned("not by the current user"));
    GTEST_SKIP() << "cannot chown a single file to another user here (not root, or root in a user namespace); "
                    "checked the directory-level ownership path instead";
  }
  auto second = NewCache();
  ASSERT_TRUE(second->GetBinary(Spec()).ok());
  EXPECT_EQ(second->GetStats().disk_hits, 0);
  EXPECT_TRUE(Warned("not by the current user"));
}

TEST_F(JitCacheTest, WarmCompilesForAnArchWithoutAGpu) {
  auto cache = NewCache();
  std::vector<KernelSpec> specs = {Spec("64"), Spec("128"), Spec("256")};
  size_t last = 0;
  absl::Status st = cache->Warm(specs, "sm_80", [&](size_t done, size_t total, const KernelSpec& s) {
    EXPECT_EQ(total, 3u);
    EXPECT_EQ(s.arch, "sm_80");
    last = done;
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(last, 3u);
  EXPECT_EQ(fake_->calls, 3);
  EXPECT_EQ(cache->ListDisk()->size(), 3u);
  // Warming again compiles nothing.
  auto again = NewCache();
  ASSERT_TRUE(again->Warm(specs, "sm_80").ok());
  EXPECT_EQ(fake_->calls, 3);
  EXPECT_EQ(again->GetStats().disk_hits, 3);
  fake_->fail = true;
  absl::Status bad = NewCache()->Warm({Spec("512")}, "sm_80");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("1 of 1"), absl::string_view::npos) << bad;
  // Reported once, before any compile, and never a success that leaves nothing on disk.
  fake_->fail = false;
  const int calls = fake_->calls;
  absl::Status arch = NewCache()->Warm(specs, "sm_080");
  EXPECT_NE(arch.message().find("sm_080"), absl::string_view::npos) << arch;
  absl::Status off = NewCache(/*enabled=*/false)->Warm(specs, "sm_80");
  EXPECT_NE(off.message().find("disabled"), absl::string_view::npos) << off;
  EXPECT_EQ(fake_->calls, calls);
}

// A warm stores every kernel, also those the process holds in memory already (it used to take them from memory,
// write nothing after a clear, and report success), and fails when a file cannot be written.
TEST_F(JitCacheTest, WarmStoresWhatMemoryHoldsAndFailsWhereItCannotWrite) {
  auto cache = NewCache();
  std::vector<KernelSpec> specs = {Spec("64"), Spec("128"), Spec("256")};
  ASSERT_TRUE(cache->Warm(specs, "sm_80").ok());
  ASSERT_TRUE(cache->ClearDisk().ok());
  ASSERT_EQ(cache->ListDisk()->size(), 0u);
  ASSERT_TRUE(cache->Warm(specs, "sm_80").ok());
  EXPECT_EQ(cache->ListDisk()->size(), 3u);
  EXPECT_EQ(fake_->calls, 3);  // stored from memory, not compiled again
  ASSERT_TRUE(cache->ClearDisk().ok());
  KernelSpec blocked = specs[1];
  blocked.arch = "sm_80";
  ASSERT_EQ(mkdir(KeyPath(*cache, blocked).c_str(), 0700), 0);  // a directory where the file must go
  absl::Status st = cache->Warm(specs, "sm_80");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1 of 3 kernels failed (cache " + dir_ + ")"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("cannot write kernel cache file"), absl::string_view::npos) << st;
}

TEST_F(JitCacheTest, FollowsConfigCacheDir) {
  core::Config& config = core::Config::Global();
  ASSERT_TRUE(config.Set("cache.dir", core::KnobValue(dir_)).ok());
  KernelCache cache(KernelCacheOptions{fake_, std::nullopt, nullptr});
  ASSERT_TRUE(cache.GetBinary(Spec()).ok());
  EXPECT_EQ(cache.DiskDir(), dir_);
  EXPECT_EQ(DirEntries(dir_).size(), 1u);
  ASSERT_TRUE(config.Set("cache.enabled", core::KnobValue(false)).ok());
  EXPECT_EQ(cache.DiskDir(), "");
  config.ResetRuntime();
}

TEST(DefaultCacheDir, XdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/cache/bnb/kernels");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(DefaultCacheDir(), "/home/u/.cache/bnb/kernels");
  if (xdg) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace bnb::jit
