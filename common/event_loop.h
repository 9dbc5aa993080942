#pragma once

#include <cstdint>
#include <functional>

#include "common/clock.h"

namespace ddprun {

// A single-threaded event loop, injected so that state machines (the
// elastic agent, the rendezvous client's retries) run on a manual loop and
// a FakeClock in tests. Every callback runs on the loop thread, one at a
// time. The agent's implementation is agent/process/asio_event_loop.h.
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
  // for Cancel(). Loop thread only.
  virtual TimerId RunAt(Clock::TimePoint when, std::function<void()> fn) = 0;

  // Cancels a timer that has not fired yet; a fired or unknown id is ignored.
  // Loop thread only.
  virtual void Cancel(TimerId id) = 0;
};

}  // namespace ddprun
