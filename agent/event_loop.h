#pragma once

#include <cstdint>
#include <functional>

#include "common/clock.h"

namespace ddprun::agent {

// The agent's single-threaded event loop, injected so the elastic loop can be
// driven by a manual loop and a FakeClock in tests. Every callback runs on the
// loop thread, one at a time.
class EventLoop {
 public:
  using TimerId = uint64_t;

  virtual ~EventLoop() = default;

  // The clock that RunAt deadlines are measured against. Never null.
  virtual Clock* clock() = 0;

  // Queues `fn` to run on the loop thread. Thread-safe (the only method that
  // may be called from another thread).
  virtual void Post(std::function<void()> fn) = 0;

  // Runs `fn` on the loop thread once clock()->Now() >= `when`. Returns an id
  // for Cancel().
  virtual TimerId RunAt(Clock::TimePoint when, std::function<void()> fn) = 0;

  // Cancels a timer that has not fired yet; a fired or unknown id is ignored.
  virtual void Cancel(TimerId id) = 0;
};

}  // namespace ddprun::agent
