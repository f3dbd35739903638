// The on-disk kernel cache: one file per key, safe against other users, concurrent processes and corruption.
//
// Safety rules:
//   - The directory is created with mode 0700. A directory that another user controls, on its path too (see
//     core::MakeTrustedDir: a directory on the way owned by another user than the current one or root, or
//     writable by group or others without the sticky bit; a symlink another user owns), or that is not writable
//     by us, disables the disk cache (one warning naming it); kernels are then compiled and kept in memory only.
//   - A file is loaded only when it is a regular file (not a symlink) owned by the current user and not writable
//     by group or others (core::ReadTrustedFile), and its header checks out (magic, format version, key, payload
//     length, SHA-256 of the payload). Anything else is a miss (one warning per kind of problem); the caller
//     recompiles and Store() replaces the file.
//   - Store() writes a temp file with a unique name (pid, thread, counter) in the cache directory itself, fsyncs
//     and closes it, then renames it into place: readers never see half a file, and concurrent writers of the same
//     key all succeed (the last rename wins; all wrote the same bytes).
//   - No method fails the caller's operation: Load() misses and Store() warns (and says what failed, for a warm,
//     which must fail when it leaves files unwritten).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bnb/jit/kernel_spec.h"
#include "bnb/jit/warnings.h"

namespace bnb::jit {

inline constexpr char kCacheFileSuffix[] = ".bnbk";
inline constexpr size_t kCacheHeaderSize = 120;

struct DiskCacheOptions {
  std::string dir;       // the cache directory; empty: DefaultCacheDir()
  bool enabled = true;   // false: Load() always misses, Store() does nothing, no directory is created
  WarningSink warn;      // null: stderr
  // The user the directory and files must belong to; -1: the current (effective) user. Tests set another uid to
  // exercise the "owned by someone else" paths where they cannot chown.
  int64_t owner_uid = -1;
};

// $XDG_CACHE_HOME/bnb/kernels, else $HOME/.cache/bnb/kernels; empty when neither variable is set.
std::string DefaultCacheDir();

// The cache file format (see disk_cache.cc for the layout). Decode returns DataLoss naming the failed check.
std::string EncodeCacheFile(absl::string_view key, const Binary& binary);
absl::StatusOr<Binary> DecodeCacheFile(absl::string_view key, absl::string_view bytes);

struct CacheFileInfo {
  std::string name;   // file name within the cache directory
  int64_t size = 0;   // bytes
  int64_t mtime = 0;  // seconds since the epoch
};

class DiskCache {
 public:
  explicit DiskCache(DiskCacheOptions options);

  // The directory in use, or empty when the disk cache is off or unusable. Prepares it on first call.
  std::string dir();
  // OK when dir() is not empty, else FailedPrecondition saying why (disabled, or unusable: see the warning).
  absl::Status Usable();

  // The binary stored for `key` (64 hex digits), or nullopt on a miss of any kind.
  std::optional<Binary> Load(const std::string& key);
  // Stores the binary for `key`, replacing any file there. Failures warn once and come back as the status; the
  // disk cache off or unusable is OK (nothing to store into).
  absl::Status Store(const std::string& key, const Binary& binary);

  // The cache files (and leftover temp files), sorted by name. Error when the cache is off or unusable.
  absl::StatusOr<std::vector<CacheFileInfo>> List();
  // Removes every cache file and leftover temp file (those older than 10 minutes: a younger one is likely a store
  // in progress); returns how many. Error as for List().
  absl::StatusOr<int> Clear();

  std::string PathFor(const std::string& key) const;

 private:
  void Prepare();  // mu_ held
  uid_t Owner() const;

  DiskCacheOptions options_;
  OnceWarner warner_;
  std::mutex mu_;
  bool prepared_ = false;
  std::string dir_;  // empty: unusable
};

}  // namespace bnb::jit
