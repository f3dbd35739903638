#include "bnb/jit/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bnb/core/config.h"
#include "bnb/core/trust.h"
#include "bnb/jit/sha256.h"

namespace bnb::jit {
namespace {

// File layout, integers little-endian:
//   [0, 8)     magic "BNBJITK\0"
//   [8, 12)    format version (kCacheFormatVersion)
//   [12, 16)   reserved, 0
//   [16, 80)   the key, 64 hex digits (guards against a file renamed or copied under another key)
//   [80, 88)   payload length
//   [88, 120)  SHA-256 of the payload
//   payload:   kind (1 byte: 1 CUBIN, 2 PTX), lowered-name length (4 bytes), lowered name, image
constexpr char kMagic[8] = {'B', 'N', 'B', 'J', 'I', 'T', 'K', '\0'};
constexpr int64_t kMaxFileSize = int64_t{64} << 20;  // kernels are KBs; a junk file is not read into memory
constexpr char kTempMarker[] = ".tmp.";
constexpr int64_t kTempInProgressSeconds = 600;  // Clear() leaves temp files younger than this

void PutLE(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint64_t GetLE(absl::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// Names this cache writes, and nothing else: `cache clear` must never delete a user's file that merely ends in
// .bnbk, were cache.dir pointed at their home.
constexpr size_t kKeyLength = 64;
bool IsKeyAt(const std::string& name, size_t at) {
  if (name.size() < at + kKeyLength) return false;
  for (size_t i = at; i < at + kKeyLength; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}
// "." key ".tmp." ... (Store's temporary files)
bool IsTempName(const std::string& name) {
  return name[0] == '.' && IsKeyAt(name, 1) && name.compare(1 + kKeyLength, sizeof(kTempMarker) - 1, kTempMarker) == 0;
}
// key ".bnbk"
bool IsCacheName(const std::string& name) {
  return name.size() == kKeyLength + sizeof(kCacheFileSuffix) - 1 && IsKeyAt(name, 0) &&
         name.compare(kKeyLength, std::string::npos, kCacheFileSuffix) == 0;
}

}  // namespace

std::string DefaultCacheDir() {
  const std::string dir = core::XdgBnbDir("XDG_CACHE_HOME", ".cache");
  return dir.empty() ? "" : absl::StrCat(dir, "/kernels");
}

std::string EncodeCacheFile(absl::string_view key, const Binary& binary) {
  std::string payload;
  payload.push_back(static_cast<char>(binary.kind));
  PutLE(&payload, binary.lowered_name.size(), 4);
  payload += binary.lowered_name;
  payload += binary.image;
  std::string out(kMagic, sizeof(kMagic));
  PutLE(&out, kCacheFormatVersion, 4);
  PutLE(&out, 0, 4);
  std::string k(key);
  k.resize(64, '\0');
  out += k;
  PutLE(&out, payload.size(), 8);
  const auto digest = Sha256Digest(payload);
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  out += payload;
  return out;
}

absl::StatusOr<Binary> DecodeCacheFile(absl::string_view key, absl::string_view bytes) {
  const auto fail = [](const std::string& what) { return absl::DataLossError(what); };
  if (bytes.size() < kCacheHeaderSize) {
    return fail(absl::StrCat("file holds ", bytes.size(), " bytes, shorter than the ", kCacheHeaderSize,
                             "-byte header"));
  }
  if (bytes.substr(0, 8) != absl::string_view(kMagic, 8)) return fail("bad magic (not a bnb kernel cache file)");
  const uint64_t version = GetLE(bytes, 8, 4);
  if (version != kCacheFormatVersion) {
    return fail(absl::StrCat("format version ", version, ", expected ", kCacheFormatVersion));
  }
  if (GetLE(bytes, 12, 4) != 0) return fail("reserved header field is not zero");
  std::string k(key);
  k.resize(64, '\0');
  if (bytes.substr(16, 64) != k) return fail("the header names another key");
  const uint64_t length = GetLE(bytes, 80, 8);
  if (length != bytes.size() - kCacheHeaderSize) {
    return fail(absl::StrCat("payload length ", bytes.size() - kCacheHeaderSize, ", header says ", length));
  }
  const absl::string_view payload = bytes.substr(kCacheHeaderSize);
  const auto digest = Sha256Digest(payload);
  if (bytes.substr(88, 32) != absl::string_view(reinterpret_cast<const char*>(digest.data()), 32)) {
    return fail("payload checksum mismatch");
  }
  if (payload.size() < 5) return fail("payload too short");
  Binary b;
  const uint8_t kind = static_cast<uint8_t>(payload[0]);
  if (kind != static_cast<uint8_t>(BinaryKind::kCubin) && kind != static_cast<uint8_t>(BinaryKind::kPtx)) {
    return fail(absl::StrCat("unknown binary kind ", int{kind}));
  }
  b.kind = static_cast<BinaryKind>(kind);
  const uint64_t name_len = GetLE(payload, 1, 4);
  if (name_len > payload.size() - 5) return fail("lowered name runs past the payload");
  b.lowered_name = std::string(payload.substr(5, name_len));
  b.image = std::string(payload.substr(5 + name_len));
  if (b.image.empty()) return fail("empty image");
  return b;
}

DiskCache::DiskCache(DiskCacheOptions options) : options_(std::move(options)), warner_(options_.warn) {}

std::string DiskCache::dir() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!prepared_) {
    prepared_ = true;
    Prepare();
  }
  return dir_;
}

void DiskCache::Prepare() {
  if (!options_.enabled) return;
  std::string d = options_.dir.empty() ? DefaultCacheDir() : options_.dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const auto disable = [&](const std::string& why) {
    warner_.Warn("dir", absl::StrCat("kernel disk cache disabled: ", why,
                                     ". Kernels are compiled and kept in memory for this process only. Set "
                                     "cache.dir (BNB_CACHE_DIR) to a directory of your own, or cache.enabled=false "
                                     "to silence this."));
  };
  if (d.empty()) return disable("neither XDG_CACHE_HOME nor HOME is set and cache.dir is empty");
  // Every directory on the way is checked too: one another user controls (or a symlink they planted) could
  // swap the cache for theirs, and with it the kernels this process loads.
  if (absl::Status st = core::MakeTrustedDir(d, Owner()); !st.ok()) return disable(std::string(st.message()));
  if (access(d.c_str(), W_OK | X_OK) != 0) return disable(absl::StrCat(d, " is not writable: ", ErrnoText(errno)));
  dir_ = d;
}

uid_t DiskCache::Owner() const {
  return options_.owner_uid >= 0 ? static_cast<uid_t>(options_.owner_uid) : geteuid();
}

std::string DiskCache::PathFor(const std::string& key) const { return absl::StrCat(dir_, "/", key, kCacheFileSuffix); }

std::optional<Binary> DiskCache::Load(const std::string& key) {
  if (dir().empty()) return std::nullopt;
  const std::string path = PathFor(key);
  absl::StatusOr<std::string> bytes = core::ReadTrustedFile(path, Owner(), /*follow_symlink=*/false, kMaxFileSize);
  if (absl::IsNotFound(bytes.status())) return std::nullopt;
  if (!bytes.ok()) {
    warner_.Warn("unsafe", absl::StrCat("kernel cache file ", bytes.status().message(),
                                        "; it is not loaded: the kernel is recompiled and the file replaced"));
    return std::nullopt;
  }
  absl::StatusOr<Binary> b = DecodeCacheFile(key, *bytes);
  if (b.ok()) return *std::move(b);
  warner_.Warn("corrupt", absl::StrCat("kernel cache file ", path, " is damaged (", b.status().message(),
                                       "); it is ignored, recompiled and replaced"));
  return std::nullopt;
}

absl::Status DiskCache::Store(const std::string& key, const Binary& binary) {
  if (dir().empty()) return absl::OkStatus();
  static std::atomic<uint64_t> counter{0};
  const std::string path = PathFor(key);
  const std::string temp =
      absl::StrCat(dir_, "/.", key, kTempMarker, getpid(), ".", std::hash<std::thread::id>()(std::this_thread::get_id()),
                   ".", counter.fetch_add(1));
  const std::string bytes = EncodeCacheFile(key, binary);
  const auto fail = [&](const std::string& what, int err) {
    const std::string why = absl::StrCat("cannot write kernel cache file ", path, ": ", what, ": ", ErrnoText(err));
    warner_.Warn("write", absl::StrCat(why, "; the kernel stays in memory only"));
    return absl::InternalError(why);
  };
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail(absl::StrCat("creating ", temp), errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      close(fd);
      unlink(temp.c_str());
      return fail("write", err);
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    unlink(temp.c_str());
    return fail("fsync", err);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    return fail("close", err);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    return fail("rename", err);
  }
  // Make the rename itself durable; a failure here loses nothing but durability.
  if (const int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

absl::Status DiskCache::Usable() {
  if (!dir().empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(options_.enabled ? "the kernel disk cache is unusable (see the warning given)"
                                                        : "the kernel disk cache is disabled (cache.enabled=false)");
}

absl::StatusOr<std::vector<CacheFileInfo>> DiskCache::List() {
  if (absl::Status st = Usable(); !st.ok()) return st;
  const std::string d = dir();
  DIR* dp = opendir(d.c_str());
  if (dp == nullptr) return absl::InternalError(absl::StrCat("cannot list ", d, ": ", ErrnoText(errno)));
  std::vector<CacheFileInfo> out;
  while (dirent* e = readdir(dp)) {
    const std::string name = e->d_name;
    if (!IsCacheName(name) && !IsTempName(name)) continue;
    struct stat st;
    if (lstat(absl::StrCat(d, "/", name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({name, static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtime)});
  }
  closedir(dp);
  std::sort(out.begin(), out.end(), [](const CacheFileInfo& a, const CacheFileInfo& b) { return a.name < b.name; });
  return out;
}

absl::StatusOr<int> DiskCache::Clear() {
  absl::StatusOr<std::vector<CacheFileInfo>> files = List();
  if (!files.ok()) return files.status();
  int removed = 0;
  const int64_t now = static_cast<int64_t>(time(nullptr));
  for (const CacheFileInfo& f : *files) {
    // A recent temp file is most likely another process's store in progress, whose rename would then fail.
    if (IsTempName(f.name) && now - f.mtime < kTempInProgressSeconds) continue;
    const std::string p = absl::StrCat(dir_, "/", f.name);
    if (unlink(p.c_str()) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot remove ", p, ": ", ErrnoText(errno)));
    }
  }
  return removed;
}

}  // namespace bnb::jit
