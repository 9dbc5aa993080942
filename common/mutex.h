#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace ddprun {

// std::mutex with the capability attribute, so that clang's thread-safety
// analysis checks GUARDED_BY members (common/thread_annotations.h). Also a
// BasicLockable (lock/unlock) for CondVar.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // BasicLockable spelling, for std::condition_variable_any.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::lock_guard for Mutex).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable used with a Mutex the caller holds. Every wait has a
// deadline or a predicate re-checked on wake-up (spurious wake-ups happen).
class CondVar {
 public:
  // Releases `mu` while waiting, holds it again on return (callers loop on
  // their predicate). A timed wait underneath: libstdc++ 12's untimed
  // std::condition_variable::wait is versioned GLIBCXX_3.4.30, which no
  // RHEL 9 libstdc++ has; with it the launcher's wheel would need
  // manylinux_2_35 instead of manylinux_2_34 (tests/install, contents).
  void Wait(Mutex* mu) REQUIRES(mu) {
    cv_.wait_for(*mu, std::chrono::hours(1));
  }
  // Returns false when `deadline` passed first.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline)
      REQUIRES(mu) {
    return cv_.wait_until(*mu, deadline) == std::cv_status::no_timeout;
  }
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout)
      REQUIRES(mu) {
    return cv_.wait_for(*mu, timeout) == std::cv_status::no_timeout;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace ddprun
