#include "agent/elastic/file_timer_response.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "agent/process/signal_names.h"
#include "common/logging.h"

namespace ddprun::agent {

StatusOr<std::unique_ptr<FileTimerResponse>> FileTimerResponse::Start(
    const std::map<std::string, std::string>& env, EventLoop* loop,
    Workers* workers, HangResponse* hang) {
  const std::string path = FileTimerPath(env);
  if (path.empty()) return std::unique_ptr<FileTimerResponse>();
  std::unique_ptr<FileTimerResponse> r(
      new FileTimerResponse(loop, workers, hang));
  FileTimerResponse* raw = r.get();
  DDP_ASSIGN_OR_RETURN(
      r->pipe_,
      FileTimerPipe::Create(
          loop, path, [raw](const ExpiredTimer& t) { raw->OnExpired(t); },
          [workers](int pid) {
            return workers->RunningWorker(pid) >= 0 || ::kill(pid, 0) == 0 ||
                   errno == EPERM;
          }));
  DDP_LOG(INFO) << "FileTimer server on " << path
                << " (TORCHELASTIC_TIMER_FILE of the workers)";
  return r;
}

void FileTimerResponse::OnExpired(const ExpiredTimer& t) {
  if (!workers_->GroupRunning()) return;
  const std::string what = DescribeExpired(t, loop_->clock()->WallSeconds());
  const int worker = workers_->RunningWorker(t.pid);
  if (worker >= 0 && t.signal == SIGKILL && !workers_->GroupStopping()) {
    // As torch reaps it (SIGKILL, a failed worker), after ddprun's hang
    // diagnosis: where this rank is and where the others wait.
    workers_->NoteKill(worker, "killed by the FileTimer server: " + what,
                       /*replace=*/true);
    const std::string who = "FileTimer: local_rank " + std::to_string(worker);
    hang_->KillAfterStacks(
        worker, t.pid, who + " (pid " + std::to_string(t.pid) + "): " + what,
        who + " expired");
    return;
  }
  // The worker whose process group holds t.pid (a worker leads its group).
  const int group = workers_->RunningWorker(::getpgid(t.pid));
  if (group < 0) {
    DDP_LOG(WARNING) << "FileTimer: pid " << t.pid << " is not a process of "
                     << "this agent's workers; not sending "
                     << SignalName(t.signal) << " (" << what << ")";
    return;
  }
  DDP_LOG(ERROR) << "FileTimer: pid " << t.pid << " (local_rank " << group
                 << "'s process group): " << what << ": sending "
                 << SignalName(t.signal);
  if (worker >= 0) {
    workers_->NoteKill(worker, "killed by the FileTimer server: " + what,
                       /*replace=*/false);
  }
  if (::kill(t.pid, t.signal) != 0 && errno != ESRCH) {
    DDP_LOG(WARNING) << "FileTimer: kill(" << t.pid
                     << "): " << std::strerror(errno);
  }
}

}  // namespace ddprun::agent
