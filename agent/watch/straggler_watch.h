#pragma once

#include <string>
#include <vector>

#include "agent/watch/step_rates.h"
#include "common/event_loop.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// Reads the step counts of the running workers (DDPRUN_STEP_FILE, written
// by ddprun_steps.step() or ddprun::worker::Heartbeat()) once a second,
// keeps their rates (step_rates.h), hands them to the rendezvous (they go
// with the heartbeats; `ddprun-rendezvous --status` shows them) and logs a
// warning for each straggler: a rank slower than the job's median (the
// rendezvous gives it; this node's own on one node) by the policy's factor
// for its time. Workers that never write a count are not compared.
//
// Confined to the loop thread; the client must outlive it.
class StragglerWatch {
 public:
  struct Target {
    int rank = 0;
    int local_rank = 0;
    int pid = 0;
    std::string steps_file;
  };

  StragglerWatch(EventLoop* loop, StragglerPolicy policy,
                 rendezvous::RendezvousClient* rendezvous);
  ~StragglerWatch();
  StragglerWatch(const StragglerWatch&) = delete;
  StragglerWatch& operator=(const StragglerWatch&) = delete;

  // Watches a new worker group (forgets the previous one's counts).
  void Start(std::vector<Target> targets);
  // Stops reading (the group stops); the rates sent are cleared.
  void Stop();

  // The straggler lines logged so far (for tests and the failure report).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void Tick();

  EventLoop* loop_;
  rendezvous::RendezvousClient* rendezvous_;
  StepRates rates_;
  std::vector<Target> targets_;
  std::vector<std::string> warnings_;
  EventLoop::TimerId timer_ = 0;
  bool armed_ = false;
};

}  // namespace ddprun::agent
