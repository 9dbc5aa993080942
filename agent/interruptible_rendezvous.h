#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

#include "agent/rendezvous_client.h"

namespace ddprun::agent {

// Wraps the agent's rendezvous client so that a signal stops the agent
// promptly while it is blocked in a long rendezvous call (Join: up to
// join_timeout; the exit barrier: up to --exit_barrier_timeout), where the
// agent's loop cannot see the signal.
//
// Interrupt(sig) (any thread): if the loop thread is inside Join or
// ReportSuccess, no workers run (the agent stops them before a Join and
// calls ReportSuccess once all exited): it Leave()s the job (bounded, ~2 s)
// and calls `exit_fn(128 + sig)`, which must not return (main passes
// _exit). Otherwise it records the signal and returns false; the caller then
// lets the agent stop its workers, and a Join/ReportSuccess entered later
// exits the same way.
class InterruptibleRendezvous : public RendezvousClient {
 public:
  using ExitFn = std::function<void(int exit_code)>;

  InterruptibleRendezvous(RendezvousClient* inner, ExitFn exit_fn);

  bool Interrupt(int sig);

  std::string Backend() const override { return inner_->Backend(); }
  StatusOr<RendezvousResult> Join(const JoinRequest& request,
                                  Clock::TimePoint deadline) override;
  void SetEventHandler(EventHandler handler) override {
    inner_->SetEventHandler(std::move(handler));
  }
  StatusOr<bool> ReportFailure(int64_t round, const std::string& reason,
                               bool retry) override {
    return inner_->ReportFailure(round, reason, retry);
  }
  Status ReportSuccess(int64_t round, Clock::Duration barrier_timeout) override;
  void Leave() override { inner_->Leave(); }

 private:
  // Marks the loop thread as blocked; exits at once if a signal is pending.
  void Enter();
  void Exit();
  [[noreturn]] void LeaveAndExit(int sig);

  RendezvousClient* inner_;
  ExitFn exit_fn_;
  std::mutex mu_;
  bool blocked_ = false;
  int pending_signal_ = 0;
  bool exiting_ = false;               // never cleared: the process exits
  std::condition_variable exited_cv_;  // never notified
};

}  // namespace ddprun::agent
