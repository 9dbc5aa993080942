#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// One request of torch's FileTimerClient
// (torch/distributed/elastic/timer/file_based_local_timer.py), one JSON
// line on the pipe. torch 1.13 and 2.x write the same object:
//   {"version": 1, "pid": 1234, "scope_id": "train.py#12",
//    "expiration_time": 1700000000.5, "signal": 9}
// expiration_time is wall-clock seconds (time.time() + after); a negative
// one releases the scope (the `with expires(...)` block ended).
struct TimerRequest {
  int pid = 0;
  std::string scope_id;
  double expiration_time = 0;
  int signal = 0;  // what to reap the pid with; <= 0: never reaped
};

// Parses one line as torch's FileTimerServer._get_requests reads it (the
// keys pid, scope_id, expiration_time and signal; "version" and unknown
// keys are ignored). Errors: kInvalidArgument naming what is wrong.
StatusOr<TimerRequest> ParseTimerRequest(std::string_view line);

// An expired scope's verdict: reap `pid` with `signal`.
struct ExpiredTimer {
  int pid = 0;
  std::string scope_id;  // the earliest expired scope with a signal
  double expiration_time = 0;
  int signal = 0;
  std::vector<std::string> expired_scopes;  // every expired scope of pid
};

// "its FileTimer scope 'train.py#12' expired 0.1 s ago
// (torch.distributed.elastic.timer)", every expired scope named; `now` is
// wall-clock seconds.
std::string DescribeExpired(const ExpiredTimer& t, double now);

// The timer bookkeeping of torch's FileTimerServer: timers by (pid, scope),
// a later acquire of the same scope replacing the earlier one, a release
// removing it. No pipe, no clock of its own (callers pass the wall-clock
// `now`), not thread-safe: the agent feeds it from its loop
// (file_timer_pipe.h).
class FileTimerServer {
 public:
  // register_timers(): a negative expiration_time releases the scope.
  void Register(const TimerRequest& request);

  // _run_watchdog() at `now`: every pid with a timer that expired
  // (expiration_time <= now). A pid's verdict is its earliest expired
  // timer with a signal > 0; a pid whose expired timers all have none is
  // not reaped. Every timer of those pids is then forgotten, reaped or not
  // (torch's clear_timers(reaped_worker_pids)). Sorted by pid.
  std::vector<ExpiredTimer> TakeExpired(double now);

  // Forgets the timers of the pids for which `alive` is false (torch 2.x:
  // a process that exited does not keep its timers).
  template <typename Alive>
  void ForgetDead(Alive alive) {
    for (auto it = timers_.begin(); it != timers_.end();) {
      it = alive(it->first.first) ? std::next(it) : timers_.erase(it);
    }
  }

  void Clear() { timers_.clear(); }
  std::size_t size() const { return timers_.size(); }
  // The earliest expiration_time of any timer; nullopt when none.
  std::optional<double> NextExpiration() const;

 private:
  std::map<std::pair<int, std::string>, TimerRequest> timers_;
};

}  // namespace ddprun::agent
