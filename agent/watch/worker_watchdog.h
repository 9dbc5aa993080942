#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/event_loop.h"

namespace ddprun::agent {

// What the watchdog reads about a worker; injected so the state machine is
// tested on a FakeClock without real processes. Called on the loop thread.
class WorkerProbe {
 public:
  virtual ~WorkerProbe() = default;
  // True while `pid` is stopped (state T, or t: stopped by a tracer). A pid
  // that does not exist (any more) is not stopped.
  virtual bool IsStopped(int pid) = 0;
  // An opaque stamp that changes whenever `path` is touched (its mtime in
  // ns), or nullopt when the file does not exist.
  virtual std::optional<int64_t> HeartbeatStamp(const std::string& path) = 0;
};

// The real probe: /proc/<pid>/stat and stat(2). Never blocks for long.
std::unique_ptr<WorkerProbe> MakeProcWorkerProbe();

// Detects hung workers of the current group (ddprun's --watchdog_timeout):
//  (a) a worker process that was seen stopped (SIGSTOP, a tracer) at every
//      check for at least `timeout`;
//  (b) a worker whose heartbeat file (DDPRUN_WATCHDOG_FILE, touched by
//      ddprun::worker::Heartbeat()) was touched at least once and then not
//      for at least `timeout`. A worker that never touches it is only
//      watched for (a).
// Staleness is measured on the loop's clock between checks that saw the
// same heartbeat stamp, so the file system's clock never matters.
// Detection happens at most `timeout + 2 * interval` after the worker got
// stuck. `on_stuck` runs on the loop thread once per worker and watch;
// the watchdog does not kill anything itself.
//
// Confined to the loop thread. The loop and the probe must outlive it.
class WorkerWatchdog {
 public:
  enum class Reason { kStopped, kNoHeartbeat };
  struct Stuck {
    int local_rank = 0;
    int pid = 0;
    Reason reason = Reason::kStopped;
    Clock::Duration stuck_for{};
  };
  using StuckCallback = std::function<void(const Stuck&)>;

  // `timeout` > 0. The check interval is timeout/10, clamped to
  // [50 ms, 1 s].
  WorkerWatchdog(EventLoop* loop, WorkerProbe* probe, Clock::Duration timeout,
                 StuckCallback on_stuck);
  ~WorkerWatchdog();
  WorkerWatchdog(const WorkerWatchdog&) = delete;
  WorkerWatchdog& operator=(const WorkerWatchdog&) = delete;

  // Starts watching one worker (replacing an earlier watch of local_rank);
  // arms the check timer if it is not armed.
  void Watch(int local_rank, int pid, const std::string& heartbeat_path);
  // Stops watching one worker (it exited) / every worker (the group is
  // being stopped). The timer is cancelled once nothing is watched.
  void Forget(int local_rank);
  void ForgetAll();

  Clock::Duration timeout() const { return timeout_; }
  Clock::Duration interval() const { return interval_; }
  size_t watched() const { return watched_.size(); }

 private:
  struct Watched {
    int pid = 0;
    std::string heartbeat_path;
    std::optional<Clock::TimePoint> stopped_since;
    std::optional<int64_t> stamp;
    Clock::TimePoint stamp_seen_at{};
  };

  void Arm();
  void Check();

  EventLoop* loop_;
  WorkerProbe* probe_;
  const Clock::Duration timeout_;
  const Clock::Duration interval_;
  StuckCallback on_stuck_;
  std::map<int, Watched> watched_;  // by local rank
  EventLoop::TimerId timer_ = 0;
  bool armed_ = false;
};

// "stopped (state T)" / "no heartbeat", for the console line.
const char* WatchdogReasonText(WorkerWatchdog::Reason reason);

// Why the watchdog calls a worker hung, for its log line and failure
// traceback: "stopped (state T) for 2.1 s (--watchdog_timeout=2)".
std::string DescribeStuck(const WorkerWatchdog::Stuck& stuck,
                          double timeout_s);

}  // namespace ddprun::agent
