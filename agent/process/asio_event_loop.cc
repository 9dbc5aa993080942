#include "agent/process/asio_event_loop.h"

#include <boost/asio/post.hpp>

namespace ddprun::agent {

AsioEventLoop::AsioEventLoop() : work_(boost::asio::make_work_guard(io_)) {}

AsioEventLoop::~AsioEventLoop() = default;

void AsioEventLoop::Post(std::function<void()> fn) {
  boost::asio::post(io_, std::move(fn));
}

EventLoop::TimerId AsioEventLoop::RunAt(Clock::TimePoint when,
                                        std::function<void()> fn) {
  TimerId id = next_id_++;
  auto timer = std::make_unique<boost::asio::steady_timer>(io_, when);
  timer->async_wait(
      [this, id, fn = std::move(fn)](const boost::system::error_code& ec) {
        if (ec) return;  // cancelled
        timers_.erase(id);
        fn();
      });
  timers_.emplace(id, std::move(timer));
  return id;
}

void AsioEventLoop::Cancel(TimerId id) {
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  it->second->cancel();
  timers_.erase(it);
}

void AsioEventLoop::Run() { io_.run(); }

void AsioEventLoop::Stop() { io_.stop(); }

}  // namespace ddprun::agent
