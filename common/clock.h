#pragma once

#include <chrono>

#include "common/mutex.h"

namespace ddprun {

// Time source injected into every state machine that has a deadline, so tests
// advance time explicitly instead of sleeping. Implementations are
// thread-safe.
class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;
  // Monotonic time; never goes backwards.
  virtual TimePoint Now() const = 0;
  // Wall-clock seconds since the Unix epoch (for error-file timestamps).
  virtual double WallSeconds() const = 0;

  // The process-wide real clock; never null, lives forever.
  static Clock* Real();
};

// Time only advances when Advance() is called.
class FakeClock : public Clock {
 public:
  FakeClock() = default;
  TimePoint Now() const override {
    MutexLock lock(&mu_);
    return now_;
  }
  double WallSeconds() const override {
    MutexLock lock(&mu_);
    return 1.7e9 + std::chrono::duration<double>(now_.time_since_epoch()).count();
  }
  void Advance(Duration d) {
    MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable Mutex mu_;
  TimePoint now_ GUARDED_BY(mu_){};
};

}  // namespace ddprun
