#include "agent/interruptible_rendezvous.h"

#include <cstdlib>
#include <thread>

#include "agent/signal_names.h"
#include "common/logging.h"

namespace ddprun::agent {

InterruptibleRendezvous::InterruptibleRendezvous(RendezvousClient* inner,
                                                 ExitFn exit_fn)
    : inner_(inner), exit_fn_(std::move(exit_fn)) {}

bool InterruptibleRendezvous::Interrupt(int sig) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_signal_ == 0) pending_signal_ = sig;
    if (!blocked_ || exiting_) return false;
    exiting_ = true;
  }
  DDP_LOG(INFO) << "received " << SignalName(sig)
                << " while waiting for the rendezvous: leaving the job";
  LeaveAndExit(sig);
}

void InterruptibleRendezvous::LeaveAndExit(int sig) {
  // Leave() cancels a parked Join; the agent has no workers to stop here.
  inner_->Leave();
  exit_fn_(128 + sig);
  std::abort();  // exit_fn must not return
}

void InterruptibleRendezvous::Enter() {
  int sig = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocked_ = true;
    sig = pending_signal_;
    if (sig != 0) exiting_ = true;
  }
  if (sig != 0) {
    DDP_LOG(INFO) << "stopping on " << SignalName(sig)
                  << " instead of re-joining the rendezvous";
    LeaveAndExit(sig);
  }
}

void InterruptibleRendezvous::Exit() {
  std::unique_lock<std::mutex> lock(mu_);
  blocked_ = false;
  // The signal thread cancelled this call and is exiting the process: do not
  // let the loop thread finish with the call's error code first.
  while (exiting_) exited_cv_.wait(lock);
}

StatusOr<RendezvousResult> InterruptibleRendezvous::Join(
    const JoinRequest& request, Clock::TimePoint deadline) {
  Enter();
  StatusOr<RendezvousResult> result = inner_->Join(request, deadline);
  Exit();
  return result;
}

Status InterruptibleRendezvous::ReportSuccess(int64_t round,
                                              Clock::Duration barrier_timeout) {
  Enter();
  Status s = inner_->ReportSuccess(round, barrier_timeout);
  Exit();
  return s;
}

}  // namespace ddprun::agent
