#include "common/file_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ddprun {
namespace {

// 0, or the errno of the write(2) that failed.
int WriteAll(int fd, std::string_view data) {
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

}  // namespace

Status WriteFully(int fd, std::string_view data) {
  const int err = WriteAll(fd, data);
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

Status WriteFileAtomically(const std::string& path,
                           const std::vector<std::string_view>& pieces,
                           const AtomicWriteOptions& options) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                  options.mode);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  auto fail = [&](const std::string& step, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus(step + " " + tmp, err);
  };
  for (std::string_view piece : pieces) {
    if (const int err = WriteAll(fd, piece); err != 0) {
      return fail("write", err);
    }
  }
  if (options.durable && ::fsync(fd) != 0) return fail("fsync", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("close", errno);
  if (options.before_rename) options.before_rename(tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename", errno);
  return options.durable ? FsyncDir(Dirname(path)) : Status::Ok();
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
