#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "ddprun/common/status.h"

namespace ddprun::agent {

// Delivers signals on a thread of its own (signalfd), so that a signal is
// seen even while the agent's loop thread is blocked in a rendezvous call.
//
// Start() blocks the signals in the calling thread; call it before any other
// thread exists so that every thread inherits the mask (workers do not: the
// launcher clears the mask in the child). `handler` runs on the watcher
// thread, once per delivered signal, until Stop().
class SignalWatcher {
 public:
  using Handler = std::function<void(int sig)>;

  SignalWatcher() = default;
  ~SignalWatcher();  // Stop()
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Errors: INTERNAL when signalfd/eventfd cannot be created; an invalid
  // signal number is INVALID_ARGUMENT.
  Status Start(const std::vector<int>& signals, Handler handler);

  // Joins the watcher thread; no handler runs after it returns. Idempotent.
  void Stop();

 private:
  void Loop();

  Handler handler_;
  int signal_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace ddprun::agent
