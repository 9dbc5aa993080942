#pragma once

// An EventLoop driven by hand on a FakeClock, for unit tests of the agent's
// state machines: nothing sleeps, time moves only in Advance().

#include <deque>
#include <functional>
#include <map>
#include <utility>

#include "common/event_loop.h"
#include "common/mutex.h"

namespace ddprun::testing {

class ManualEventLoop : public EventLoop {
 public:
  Clock* clock() override { return &clock_; }
  void Post(std::function<void()> fn) override {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }
  TimerId RunAt(Clock::TimePoint when, std::function<void()> fn) override {
    TimerId id = next_id_++;
    timers_[id] = {when, std::move(fn)};
    return id;
  }
  void Cancel(TimerId id) override { timers_.erase(id); }

  // Runs queued callbacks and due timers until nothing is left to run.
  void RunUntilIdle() {
    for (;;) {
      std::function<void()> fn;
      {
        MutexLock lock(&mu_);
        if (!queue_.empty()) {
          fn = std::move(queue_.front());
          queue_.pop_front();
        }
      }
      if (!fn) fn = TakeDueTimer();
      if (!fn) return;
      fn();
    }
  }
  void Advance(Clock::Duration d) {
    clock_.Advance(d);
    RunUntilIdle();
  }
  size_t pending_timers() const { return timers_.size(); }

 private:
  std::function<void()> TakeDueTimer() {
    auto best = timers_.end();
    for (auto it = timers_.begin(); it != timers_.end(); ++it) {
      if (it->second.first <= clock_.Now() &&
          (best == timers_.end() || it->second.first < best->second.first)) {
        best = it;
      }
    }
    if (best == timers_.end()) return nullptr;
    auto fn = std::move(best->second.second);
    timers_.erase(best);
    return fn;
  }

  FakeClock clock_;
  Mutex mu_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  TimerId next_id_ = 1;
  std::map<TimerId, std::pair<Clock::TimePoint, std::function<void()>>> timers_;
};

}  // namespace ddprun::testing
