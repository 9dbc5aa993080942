#include "common/file_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace ddprun {

int WriteFullyErrno(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

Status WriteFully(int fd, std::string_view data) {
  const int err = WriteFullyErrno(fd, data);
  return err == 0 ? Status::Ok() : ErrnoStatus("write", err);
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open dir " + dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync dir " + dir, err);
  return Status::Ok();
}

namespace {

// Creates a fresh temporary file for `path` (see WriteFileAtomically),
// locked. *fd: its descriptor, opened for writing; the flock lives on its
// open file description, so a dup of it keeps the lock after the close.
Status CreateLockedTemp(const std::string& path, int mode, std::string* tmp,
                        int* fd) {
  const std::string base = path + ".tmp." + std::to_string(::getpid());
  for (int n = 0; n < 1000; ++n) {
    *tmp = n == 0 ? base : base + "." + std::to_string(n);
    *fd = ::open(tmp->c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (*fd < 0) {
      if (errno == EEXIST) continue;  // a leftover, or planted: not ours
      return ErrnoStatus("create " + *tmp, errno);
    }
    int locked;
    while ((locked = ::flock(*fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    // A file system without flock: unlocked, and RemoveAbandonedTempFile()
    // cannot lock it either, so it never removes it.
    if (locked != 0) return Status::Ok();
    // RemoveAbandonedTempFile() may have taken the name between the create
    // and the lock (it saw an unlocked file): then it is gone, start over.
    struct stat st;
    if (::fstat(*fd, &st) == 0 && st.st_nlink > 0) return Status::Ok();
    ::close(*fd);
    *fd = -1;
  }
  return ErrnoStatus("create " + base + ".*", EEXIST);
}

}  // namespace

Status WriteFileAtomically(const std::string& path,
                           const std::vector<std::string_view>& pieces,
                           const AtomicWriteOptions& options) {
  return WriteFileAtomicallyWith(
      path,
      [&pieces](int fd) {
        for (std::string_view piece : pieces) {
          if (const int err = WriteFullyErrno(fd, piece); err != 0) return err;
        }
        return 0;
      },
      options);
}

Status WriteFileAtomicallyWith(const std::string& path,
                               const std::function<int(int fd)>& write,
                               const AtomicWriteOptions& options) {
  std::string tmp;
  int fd = -1;
  DDP_RETURN_IF_ERROR(CreateLockedTemp(path, options.mode, &tmp, &fd));
  // Holds the lock from the close of `fd` to the rename.
  const int lock_fd = ::dup(fd);
  auto fail = [&](const std::string& step, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    if (lock_fd >= 0) ::close(lock_fd);
    return ErrnoStatus(step + " " + tmp, err);
  };
  if (lock_fd < 0) return fail("dup", errno);
  if (const int err = write(fd); err != 0) return fail("write", err);
  if (options.durable && ::fsync(fd) != 0) return fail("fsync", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("close", errno);
  if (options.before_rename) options.before_rename(tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename", errno);
  ::close(lock_fd);
  return options.durable ? FsyncDir(Dirname(path)) : Status::Ok();
}

bool RemoveAbandonedTempFile(const std::string& tmp_path) {
  const int fd =
      ::open(tmp_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat held, now;
  bool removed = false;
  // The lock taken: no writer holds it (a crashed writer's died with it),
  // and one that creates the file now waits for it, then sees the file
  // gone. Unlinked only while the name still is the file locked.
  if (::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) &&
      ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
      ::lstat(tmp_path.c_str(), &now) == 0 && now.st_dev == held.st_dev &&
      now.st_ino == held.st_ino) {
    removed = ::unlink(tmp_path.c_str()) == 0;
  }
  ::close(fd);
  return removed;
}

StatusOr<std::string> ReadRegularFile(const std::string& path,
                                      size_t max_bytes) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("stat " + path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPreconditionError(path + ": not a regular file");
  }
  auto too_large = [&](uint64_t size) {
    return ResourceExhaustedError(path + ": " + std::to_string(size) +
                                  " bytes, over the limit of " +
                                  std::to_string(max_bytes));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return too_large(static_cast<uint64_t>(st.st_size));
  }
  // The size may change under us (a writer appending): read at most one
  // byte past the limit to tell.
  std::string out(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (true) {
    if (got == out.size()) {
      if (out.size() > max_bytes) break;
      out.resize(std::min(out.size() * 2, max_bytes + 1));
    }
    const ssize_t n = ::read(fd, &out[got], out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("read " + path, err);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > max_bytes) return too_large(got);
  out.resize(got);
  return out;
}

std::string Dirname(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Basename(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string RealPath(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return "";
  std::string out(resolved);
  ::free(resolved);
  return out;
}

std::string CurrentDir() {
  char buf[4096];
  return ::getcwd(buf, sizeof(buf)) != nullptr ? buf : ".";
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

std::string FindOnPath(const std::string& name, const std::string& path) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) {
    return IsExecutableFile(name) ? name : "";
  }
  std::string::size_type start = 0;
  while (start <= path.size()) {
    auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

}  // namespace ddprun
