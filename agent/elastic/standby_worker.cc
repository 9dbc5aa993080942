#include "agent/elastic/standby_worker.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>

#include "agent/elastic/log_dir.h"
#include "agent/elastic/worker_env.h"
#include "common/file_util.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

// How long TakeOver may wait for the socket to take the message (a
// standby blocked in its read takes it at once; one that is not reading
// it is not worth waiting for).
constexpr std::chrono::milliseconds kSendTimeout{1000};

// Sends all of `data` on non-blocking `fd`, bounded by kSendTimeout.
Status SendAll(int fd, const std::string& data) {
  const auto deadline = std::chrono::steady_clock::now() + kSendTimeout;
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return ErrnoStatus("sending the rank to the standby", errno);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLOUT, 0};
    if (left.count() <= 0 ||
        ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      return DeadlineExceededError(
          "the standby did not take its rank within 1 s");
    }
  }
  return Status::Ok();
}

}  // namespace

ProcessCallbacks StandbyWorker::Route::Through(
    const std::shared_ptr<Route>& route) {
  ProcessCallbacks cb;
  cb.on_stdout = [route](std::string_view c) { route->out(c); };
  cb.on_stderr = [route](std::string_view c) { route->err(c); };
  cb.on_exit = [route](ExitStatus s) { route->exit(s); };
  return cb;
}

std::string EncodeStandbyEnv(const EnvMap& env) {
  std::string message;
  for (const auto& [key, value] : env) {
    message += key;
    message += '=';
    message += value;
    message += '\0';
  }
  message += '\0';
  return message;
}

StandbyWorker::StandbyWorker(const AgentOptions* options, EventLoop* loop,
                             ProcessLauncher* launcher, Console* console,
                             int max_restarts)
    : options_(options),
      loop_(loop),
      launcher_(launcher),
      console_(console),
      max_restarts_(max_restarts) {}

StandbyWorker::~StandbyWorker() { Kill(); }

int StandbyWorker::pid() const { return process_ ? process_->pid() : -1; }

Status StandbyWorker::Start(const rendezvous::RendezvousResult& round) {
  Kill();
  round_ = round;
  if (!enabled_) return Status::Ok();
  const AgentOptions& o = *options_;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return ErrnoStatus("socketpair for the standby worker", errno);
  }
  fd_ = fds[0];
  const int child_fd = fds[1];
  WorkerOutput::Options wo;
  wo.prefix = "[standby]:";
  if (!o.run_log_dir.empty()) {
    const std::string dir = o.run_log_dir + "/attempt_" +
                            std::to_string(round.restart_count) + "/standby";
    Status made = MakeDirs(dir);
    if (!made.ok()) {
      ::close(child_fd);
      Forget();
      return made;
    }
    wo.file_path = dir + "/stdout.log";
    wo.to_console = false;
  }
  auto out = std::make_shared<WorkerOutput>(wo, console_);
  wo.stream = Console::Stream::kErr;
  if (!wo.file_path.empty())
    wo.file_path = Dirname(wo.file_path) + "/stderr.log";
  auto err = std::make_shared<WorkerOutput>(wo, console_);
  // Appended: every standby of the attempt writes on in the same files.
  for (WorkerOutput* stream : {out.get(), err.get()}) {
    Status opened = stream->Reopen();
    if (!opened.ok()) {
      ::close(child_fd);
      Forget();
      return opened;
    }
  }
  ProcessSpec spec;
  spec.argv = BuildWorkerArgv(o.launch, o.worker_torch, 0, o.parent_env,
                              round.rank_offset);
  spec.env = BuildStandbyEnv(o.launch, o.worker_torch, round, o.run_id,
                             o.parent_env, child_fd);
  spec.inherit_fds = {child_fd};
  auto route = std::make_shared<Route>();
  route->out = [out](std::string_view c) { out->OnChunk(c); };
  route->err = [err](std::string_view c) { err->OnChunk(c); };
  const uint64_t epoch = ++epoch_;
  route->exit = [this, epoch, out, err](ExitStatus s) {
    out->OnEof();
    err->OnEof();
    OnExit(epoch, s);
  };
  StatusOr<std::unique_ptr<Process>> p =
      launcher_->Launch(spec, Route::Through(route));
  // The child holds its end now (or never will).
  ::close(child_fd);
  if (!p.ok()) {
    Forget();
    return p.status();
  }
  process_ = std::move(p).value();
  route_ = std::move(route);
  out_ = std::move(out);
  err_ = std::move(err);
  DDP_LOG(INFO) << "standby worker started (pid " << process_->pid() << ")";
  return Status::Ok();
}

void StandbyWorker::Forget() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  said_.clear();
  ready_ = false;
  process_.reset();
  route_.reset();
  out_.reset();
  err_.reset();
}

void StandbyWorker::Kill() {
  ++epoch_;  // its exit, whenever it comes, is not counted
  if (process_) (void)process_->SignalGroup(SIGKILL);
  Forget();
}

bool StandbyWorker::Ready() {
  if (ready_ || fd_ < 0) return ready_;
  char buf[64];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      said_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // nothing more now, or EOF (it exits: OnExit follows)
  }
  ready_ = said_.find("ready\n") != std::string::npos;
  return ready_;
}

StatusOr<StandbyWorker::Handover> StandbyWorker::TakeOver(const EnvMap& env) {
  if (!Ready()) {
    return FailedPreconditionError("no standby worker is ready");
  }
  Status sent = SendAll(fd_, EncodeStandbyEnv(env));
  if (!sent.ok()) {
    Kill();
    return sent;
  }
  // What it wrote as a standby is complete; what it writes next is the
  // rank's.
  out_->OnEof();
  err_->OnEof();
  Handover handover{std::move(process_), std::move(route_)};
  // Its exit is the new owner's from now on: never counted here.
  ++epoch_;
  Forget();
  return handover;
}

void StandbyWorker::OnExit(uint64_t epoch, ExitStatus status) {
  if (epoch != epoch_) return;  // killed, or handed over
  const int pid = process_ ? process_->pid() : -1;
  Forget();
  ++restarts_;
  std::string how = status.signaled()
                        ? "killed by signal " + std::to_string(status.signal())
                        : "exit code " + std::to_string(status.exitcode);
  if (restarts_ > max_restarts_) {
    enabled_ = false;
    console_->Write(Console::Stream::kErr,
                    "[ddprun] the standby worker (pid " + std::to_string(pid) +
                        ") exited on its own (" + how + ") " +
                        std::to_string(restarts_) +
                        " times: this node runs without one (replacements "
                        "start afresh)\n");
    return;
  }
  DDP_LOG(WARNING) << "the standby worker (pid " << pid
                   << ") exited on its own (" << how << "): starting another";
  const uint64_t now = epoch_;
  loop_->Post([this, now] {
    if (now != epoch_) return;  // a Start, Kill or TakeOver came first
    Status s = Start(round_);
    if (!s.ok()) DDP_LOG(WARNING) << "standby worker: " << s.message();
  });
}

}  // namespace ddprun::agent
