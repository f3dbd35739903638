#include "bnb/core/trust.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace bnb::core {
namespace {

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

std::string Mode(const struct stat& st) { return absl::StrFormat("mode %04o", st.st_mode & 07777); }

std::string KindOf(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  return "not a regular file";
}

// Splits an absolute path's components onto a stack, the first component on top.
void PushComponents(const std::string& path, std::vector<std::string>* stack) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  stack->insert(stack->end(), parts.rbegin(), parts.rend());
}

}  // namespace

std::string ControlledByOthers(const struct stat& st, uid_t uid, PathRole role) {
  const bool on_the_way = role == PathRole::kOnTheWay;
  if (st.st_uid != uid && !(on_the_way && st.st_uid == 0)) {
    return absl::StrCat("is owned by uid ", st.st_uid, ", not by the current user (uid ", uid, ")",
                        on_the_way ? " or root" : "");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !(on_the_way && (st.st_mode & S_ISVTX) != 0)) {
    return absl::StrCat("is writable by group or others", on_the_way ? " without the sticky bit" : "", " (",
                        Mode(st), ")");
  }
  return "";
}

absl::StatusOr<std::string> ReadTrustedFile(const std::string& path, uid_t uid, bool follow_symlink,
                                            int64_t max_bytes) {
  const auto refuse = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(path, " ", why));
  };
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_symlink ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    if (err == ELOOP && !follow_symlink) return refuse("is a symbolic link");
    return refuse(absl::StrCat("cannot be opened: ", ErrnoText(err)));
  }
  struct stat st;
  std::string problem, bytes;
  if (fstat(fd, &st) != 0) {
    problem = absl::StrCat("cannot be examined (fstat): ", ErrnoText(errno));
  } else if (!S_ISREG(st.st_mode)) {
    problem = absl::StrCat("is ", KindOf(st), ", not a regular file");
  } else if (std::string why = ControlledByOthers(st, uid, PathRole::kUsed); !why.empty()) {
    problem = why;
  } else if (st.st_size > max_bytes) {
    problem = absl::StrCat("is implausibly large (", st.st_size, " bytes, more than ", max_bytes, ")");
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = read(fd, &bytes[got], bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        problem = absl::StrCat("cannot be read: ", ErrnoText(errno));
        break;
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    if (problem.empty() && got != bytes.size()) {
      problem = absl::StrCat("was cut short while read (", got, " of ", bytes.size(), " bytes)");
    }
  }
  close(fd);
  if (!problem.empty()) return refuse(problem);
  return bytes;
}

absl::Status MakeTrustedDir(const std::string& path, uid_t uid) {
  if (path.empty() || path[0] != '/') {
    return absl::FailedPreconditionError(absl::StrCat("'", path, "' is not an absolute path"));
  }
  const auto fail = [&](const std::string& at, const std::string& why) {
    return absl::FailedPreconditionError(
        at == path ? absl::StrCat(at, " ", why) : absl::StrCat(at, " (for ", path, ") ", why));
  };
  std::vector<std::string> todo;  // components still to walk, the next on top
  PushComponents(path, &todo);
  std::string at;  // the walked and checked directory, "" for /: no symlink in it, so its parent is a prefix
  int links = 0;
  struct stat st;
  const auto check = [&](const std::string& dir, PathRole role) {
    const std::string shown = dir.empty() ? "/" : dir;
    if (lstat(shown.c_str(), &st) != 0) return fail(shown, absl::StrCat("cannot be examined: ", ErrnoText(errno)));
    if (!S_ISDIR(st.st_mode)) return fail(shown, absl::StrCat("is ", KindOf(st), ", not a directory"));
    const std::string why = ControlledByOthers(st, uid, role);
    return why.empty() ? absl::OkStatus() : fail(shown, why);
  };
  if (absl::Status s = check(at, PathRole::kOnTheWay); !s.ok()) return s;
  while (!todo.empty()) {
    const std::string name = std::move(todo.back());
    todo.pop_back();
    if (name == ".") continue;
    if (name == "..") {
      at.resize(at.empty() ? 0 : at.rfind('/'));
      continue;
    }
    const std::string next = absl::StrCat(at, "/", name);
    if (lstat(next.c_str(), &st) != 0) {
      if (errno != ENOENT) return fail(next, absl::StrCat("cannot be examined: ", ErrnoText(errno)));
      if (mkdir(next.c_str(), 0700) != 0 && errno != EEXIST) {
        return fail(next, absl::StrCat("cannot be created: ", ErrnoText(errno)));
      }
      if (lstat(next.c_str(), &st) != 0) return fail(next, absl::StrCat("cannot be examined: ", ErrnoText(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      if (st.st_uid != uid && st.st_uid != 0) {
        return fail(next, absl::StrCat("is a symbolic link owned by uid ", st.st_uid,
                                       ", not by the current user (uid ", uid, ") or root"));
      }
      if (++links > 40) return fail(next, "leads through more than 40 symbolic links");
      std::string target(PATH_MAX, '\0');
      const ssize_t n = readlink(next.c_str(), target.data(), target.size());
      if (n < 0 || static_cast<size_t>(n) >= target.size()) {
        return fail(next, absl::StrCat("is a symbolic link that cannot be read: ",
                                       ErrnoText(n < 0 ? errno : ENAMETOOLONG)));
      }
      target.resize(static_cast<size_t>(n));
      if (!target.empty() && target[0] == '/') at.clear();
      PushComponents(target, &todo);
      continue;
    }
    if (absl::Status s = check(next, PathRole::kOnTheWay); !s.ok()) return s;
    at = next;
  }
  // The directory itself, checked last: the path may end in . or .. after all.
  return check(at, PathRole::kUsed);
}

}  // namespace bnb::core
