#pragma once

#include <string>
#include <vector>

#include "agent/watch/step_file.h"
#include "agent/watch/step_rates.h"
#include "common/event_loop.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// Reads the running workers' step files (DDPRUN_STEP_FILE, written by
// ddprun_steps.step() or ddprun::worker::Heartbeat(); step_file.h) once a
// second, keeps their rates (step_rates.h), hands every worker's progress
// to the rendezvous (pid, state, steps, rate, straggler mark, the total
// and scalars the worker reports; they go with the heartbeats, and
// `ddprun-rendezvous --status` and the live view show them) and logs a
// warning for each straggler: a rank slower than the job's median (the
// rendezvous gives it; this node's own on one node) by the policy's factor
// for its time. Workers that never write a count are not compared.
//
// Bounded: at most kMaxScalars scalars per rank (step_file.h) and
// kScalarBudget bytes of scalars per heartbeat (later ranks' scalars are
// left out), so a heartbeat stays far below the server's 64 KiB limit.
//
// Confined to the loop thread; the client must outlive it.
class StragglerWatch {
 public:
  struct Target {
    int rank = 0;
    int local_rank = 0;
    int pid = 0;
    std::string steps_file;  // "" = the worker writes no counts
  };
  static constexpr size_t kScalarBudget = 16 * 1024;

  StragglerWatch(EventLoop* loop, StragglerPolicy policy,
                 rendezvous::RendezvousClient* rendezvous);
  ~StragglerWatch();
  StragglerWatch(const StragglerWatch&) = delete;
  StragglerWatch& operator=(const StragglerWatch&) = delete;

  // Watches a new worker group (forgets the previous one's counts); every
  // Start after the first counts as a worker restart of this node.
  void Start(std::vector<Target> targets);
  // The worker of global rank `rank` exited (succeeded: with code 0).
  void NoteExit(int rank, bool succeeded);
  // The worker of global rank `rank` runs again as `pid` (restart scope
  // "failed": replaced alone); its rate starts over from its step file.
  void Restarted(int rank, int pid);
  // Stops reading (the group stops): its running workers are reported as
  // stopped, without a rate, until the next Start.
  void Stop();

  // The straggler lines logged so far (for tests and the failure report).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  using State = rendezvous::RankStepRate::State;
  struct Worker {
    Target target;
    State state = State::kRunning;
    StepFile last;  // the last file read
  };

  void Tick();
  // Sends every worker's progress to the rendezvous client.
  void Publish();
  void Arm(Clock::TimePoint at);

  EventLoop* loop_;
  rendezvous::RendezvousClient* rendezvous_;
  StepRates rates_;
  std::vector<Worker> workers_;
  std::vector<std::string> warnings_;
  int starts_ = 0;
  EventLoop::TimerId timer_ = 0;
  bool armed_ = false;
};

}  // namespace ddprun::agent
