#include "agent/watch/worker_watchdog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace ddprun::agent {
namespace {

class ProcWorkerProbe : public WorkerProbe {
 public:
  bool IsStopped(int pid) override {
    // /proc/<pid>/stat: "pid (comm) S ..."; comm may contain ')' and spaces,
    // so the state is the field after the last ')'.
    const std::string path = "/proc/" + std::to_string(pid) + "/stat";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    if (n <= 0) return false;
    std::string stat(buf, static_cast<size_t>(n));
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
    char state = stat[paren + 2];
    return state == 'T' || state == 't';
  }

  std::optional<int64_t> HeartbeatStamp(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
           st.st_mtim.tv_nsec;
  }
};

Clock::Duration CheckInterval(Clock::Duration timeout) {
  using std::chrono::milliseconds;
  return std::clamp<Clock::Duration>(timeout / 10, milliseconds(50),
                                     milliseconds(1000));
}

}  // namespace

std::unique_ptr<WorkerProbe> MakeProcWorkerProbe() {
  return std::make_unique<ProcWorkerProbe>();
}

const char* WatchdogReasonText(WorkerWatchdog::Reason reason) {
  switch (reason) {
    case WorkerWatchdog::Reason::kStopped:
      return "stopped (state T)";
    case WorkerWatchdog::Reason::kNoHeartbeat:
      return "without a heartbeat";
  }
  return "stuck";
}

std::string DescribeStuck(const WorkerWatchdog::Stuck& stuck,
                          double timeout_s) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), " for %.1f s (--watchdog_timeout=%g)",
                std::chrono::duration<double>(stuck.stuck_for).count(),
                timeout_s);
  return WatchdogReasonText(stuck.reason) + std::string(buf);
}

WorkerWatchdog::WorkerWatchdog(EventLoop* loop, WorkerProbe* probe,
                               Clock::Duration timeout, StuckCallback on_stuck)
    : loop_(loop),
      probe_(probe),
      timeout_(timeout),
      interval_(CheckInterval(timeout)),
      on_stuck_(std::move(on_stuck)) {}

WorkerWatchdog::~WorkerWatchdog() { ForgetAll(); }

void WorkerWatchdog::Watch(int local_rank, int pid,
                           const std::string& heartbeat_path) {
  Watched w;
  w.pid = pid;
  w.heartbeat_path = heartbeat_path;
  w.stamp_seen_at = loop_->clock()->Now();
  watched_[local_rank] = std::move(w);
  Arm();
}

void WorkerWatchdog::Forget(int local_rank) {
  watched_.erase(local_rank);
  if (watched_.empty() && armed_) {
    loop_->Cancel(timer_);
    armed_ = false;
  }
}

void WorkerWatchdog::ForgetAll() {
  watched_.clear();
  if (armed_) {
    loop_->Cancel(timer_);
    armed_ = false;
  }
}

void WorkerWatchdog::Arm() {
  if (armed_ || watched_.empty()) return;
  armed_ = true;
  timer_ = loop_->RunAt(loop_->clock()->Now() + interval_, [this] {
    armed_ = false;
    Check();
  });
}

void WorkerWatchdog::Check() {
  const Clock::TimePoint now = loop_->clock()->Now();
  std::vector<Stuck> stuck;
  for (auto& [local_rank, w] : watched_) {
    const bool stopped = probe_->IsStopped(w.pid);
    if (!stopped) {
      w.stopped_since.reset();
    } else if (!w.stopped_since) {
      w.stopped_since = now;
    }
    Clock::Duration stopped_for =
        w.stopped_since ? now - *w.stopped_since : Clock::Duration::zero();
    Clock::Duration silent_for = Clock::Duration::zero();
    if (!w.heartbeat_path.empty()) {
      std::optional<int64_t> stamp = probe_->HeartbeatStamp(w.heartbeat_path);
      if (stamp && stamp != w.stamp) {
        w.stamp = stamp;
        w.stamp_seen_at = now;
      } else if (w.stamp) {
        silent_for = now - w.stamp_seen_at;  // armed by a first touch
      }
    }
    if (stopped_for < timeout_ && silent_for < timeout_) continue;
    Stuck s;
    s.local_rank = local_rank;
    s.pid = w.pid;
    // A stopped worker is also silent; name the cause the user can act on.
    s.reason = stopped ? Reason::kStopped : Reason::kNoHeartbeat;
    s.stuck_for = std::max(stopped_for, silent_for);
    stuck.push_back(s);
  }
  for (const Stuck& s : stuck) watched_.erase(s.local_rank);
  Arm();
  // Last: the callback may stop the group (ForgetAll) or watch new workers.
  for (const Stuck& s : stuck) {
    if (on_stuck_) on_stuck_(s);
  }
}

}  // namespace ddprun::agent
