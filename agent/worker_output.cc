#include "agent/worker_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_util.h"

namespace ddprun::agent {
WorkerOutput::WorkerOutput(Options options, Console* console)
    : options_(std::move(options)), console_(console) {}

WorkerOutput::~WorkerOutput() {
  if (fd_ >= 0) ::close(fd_);
}

Status WorkerOutput::Open() {
  if (options_.file_path.empty()) return Status::Ok();
  fd_ = ::open(options_.file_path.c_str(),
               O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoStatus("cannot create " + options_.file_path, errno);
  return Status::Ok();
}

void WorkerOutput::OnChunk(std::string_view chunk) {
  // A full disk must not stop the agent: the console still gets the line.
  if (fd_ >= 0) (void)WriteFully(fd_, chunk);
  if (!options_.to_console) return;
  std::string lines = splitter_.Feed(chunk, options_.prefix);
  if (!lines.empty()) console_->Write(options_.stream, lines);
}

void WorkerOutput::OnEof() {
  if (options_.to_console) {
    std::string rest = splitter_.Flush(options_.prefix);
    if (!rest.empty()) console_->Write(options_.stream, rest);
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace ddprun::agent
