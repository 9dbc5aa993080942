#include "agent/elastic/file_timer_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "agent/cli/cli_values.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A request longer than PIPE_BUF is refused by torch's client; a longer
// "line" is garbage and is dropped rather than kept growing.
constexpr std::size_t kMaxLine = 64 * 1024;

bool Alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

std::string FileTimerPath(const std::map<std::string, std::string>& env) {
  auto on = env.find("TORCHELASTIC_ENABLE_FILE_TIMER");
  if (on == env.end() || on->second != "1") return "";
  auto file = env.find("TORCHELASTIC_TIMER_FILE");
  if (file != env.end() && !file->second.empty()) return file->second;
  auto tmp = env.find("TMPDIR");
  return (tmp == env.end() || tmp->second.empty() ? "/tmp" : tmp->second) +
         "/watchdog_timer_" + RandomUuid4();
}

StatusOr<std::unique_ptr<FileTimerPipe>> FileTimerPipe::Create(
    EventLoop* loop, std::string path, ExpiredFn on_expired, AliveFn alive) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && ::unlink(path.c_str()) != 0) {
    return ErrnoStatus("cannot replace " + path, errno);
  }
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return ErrnoStatus("cannot create the FileTimer pipe " + path, errno);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    ::unlink(path.c_str());
    return ErrnoStatus("cannot open the FileTimer pipe " + path, e);
  }
  if (!alive) alive = Alive;
  std::unique_ptr<FileTimerPipe> pipe(new FileTimerPipe(
      loop, std::move(path), fd, std::move(on_expired), std::move(alive)));
  pipe->Arm();
  return pipe;
}

FileTimerPipe::FileTimerPipe(EventLoop* loop, std::string path, int fd,
                             ExpiredFn on_expired, AliveFn alive)
    : loop_(loop),
      path_(std::move(path)),
      fd_(fd),
      on_expired_(std::move(on_expired)),
      alive_(std::move(alive)) {}

FileTimerPipe::~FileTimerPipe() {
  if (armed_) loop_->Cancel(timer_);
  ::close(fd_);
  ::unlink(path_.c_str());
}

void FileTimerPipe::Arm() {
  armed_ = true;
  timer_ = loop_->RunAt(loop_->clock()->Now() + kPollInterval, [this] {
    armed_ = false;
    Poll();
    Arm();
  });
}

void FileTimerPipe::Poll() {
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n > 0) {
      pending_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    // 0: no writer has it open; EAGAIN: nothing more for now.
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  std::string::size_type start = 0;
  for (auto end = pending_.find('\n'); end != std::string::npos;
       end = pending_.find('\n', start)) {
    std::string_view line(pending_.data() + start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    StatusOr<TimerRequest> request = ParseTimerRequest(line);
    if (!request.ok()) {
      DDP_LOG(WARNING) << request.status().message() << " (ignored)";
      continue;
    }
    server_.Register(*request);
  }
  pending_.erase(0, start);
  if (pending_.size() > kMaxLine) {
    DDP_LOG(WARNING) << "FileTimer pipe " << path_ << ": dropping "
                     << pending_.size() << " bytes without a line end";
    pending_.clear();
  }
  if (server_.size() == 0) return;
  server_.ForgetDead(alive_);
  for (const ExpiredTimer& t :
       server_.TakeExpired(loop_->clock()->WallSeconds())) {
    on_expired_(t);
  }
}

}  // namespace ddprun::agent
