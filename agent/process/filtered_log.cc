#include "agent/process/filtered_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_util.h"

namespace ddprun::agent {

FilteredLog::FilteredLog(std::string path, std::vector<std::string> needles)
    : path_(std::move(path)), needles_(std::move(needles)) {}

FilteredLog::~FilteredLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status FilteredLog::Open() {
  fd_ = ::open(path_.c_str(),
               O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoStatus("cannot create " + path_, errno);
  return Status::Ok();
}

void FilteredLog::Offer(std::string_view prefix, std::string_view line) {
  if (fd_ < 0) return;
  for (const std::string& needle : needles_) {
    if (line.find(needle) == std::string_view::npos) continue;
    std::string out;
    out.reserve(prefix.size() + line.size());
    out.append(prefix);
    out.append(line);
    (void)WriteFully(fd_, out);
    return;
  }
}

}  // namespace ddprun::agent
