// Whether anyone but the user can change a file or directory bnb takes settings or code from: the one rule for the
// config files and the kernel cache. Another user who controls one could otherwise make bnb load their code.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace bnb::core {

enum class PathRole {
  kUsed,      // what bnb reads or writes: a config file, the kernel cache directory, a cache file
  kOnTheWay,  // a directory on the path to one of those
};

// Why someone other than `uid` could change what `st` describes ("is owned by uid 1001, not by the current user
// (uid 0)", "is writable by group or others (mode 0666)"), or "" when no one can. A kUsed object must be owned
// by `uid` and not writable by group or others. A kOnTheWay directory may also be root's, and writable by all
// when its sticky bit is set (as /tmp is), which keeps others from renaming or removing what is not theirs.
std::string ControlledByOthers(const struct stat& st, uid_t uid, PathRole role);

// The whole of the regular file at `path`, checked on the open descriptor (fstat: a file swapped after a check
// cannot slip through) and opened non-blocking, so a FIFO there never makes the caller wait. NotFound when
// nothing is there; FailedPrecondition saying why ("is a FIFO, not a regular file") for anything else that is not
// a regular file `uid` alone controls (kUsed), that cannot be opened or read, or that is longer than max_bytes.
// A symlink at `path` is followed (its target must pass the same checks) only where follow_symlink is set.
absl::StatusOr<std::string> ReadTrustedFile(const std::string& path, uid_t uid, bool follow_symlink,
                                            int64_t max_bytes);

// Makes `path` (absolute) a directory only `uid` controls: creates what is missing (mode 0700) and checks every
// component from / down, the last as kUsed and the others as kOnTheWay. A symlink on the way is followed when it
// is the user's or root's (a link cannot be changed, only replaced by whoever may write its directory, which was
// checked), and its target is checked the same way; one that another user owns is refused. The error names the
// component and why.
absl::Status MakeTrustedDir(const std::string& path, uid_t uid);

}  // namespace bnb::core
