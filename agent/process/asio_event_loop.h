#pragma once

#include <map>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/event_loop.h"

namespace ddprun::agent {

// EventLoop on a Boost.Asio io_context and the real clock. Run() on the
// thread that owns the agent (the process's main thread).
class AsioEventLoop : public EventLoop {
 public:
  AsioEventLoop();
  ~AsioEventLoop() override;

  Clock* clock() override { return Clock::Real(); }
  void Post(std::function<void()> fn) override;
  TimerId RunAt(Clock::TimePoint when, std::function<void()> fn) override;
  void Cancel(TimerId id) override;

  // Runs handlers until Stop() is called. Blocks the calling thread.
  void Run();
  // Makes Run() return once the current handler finishes. Thread-safe.
  void Stop();

  boost::asio::io_context& io_context() { return io_; }

 private:
  boost::asio::io_context io_;
  // Keeps Run() from returning while no work is queued.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  TimerId next_id_ = 1;
  std::map<TimerId, std::unique_ptr<boost::asio::steady_timer>> timers_;
};

}  // namespace ddprun::agent
