#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "agent/elastic/worker_store.h"
#include "common/event_loop.h"

namespace ddprun::agent {

// --restart_scope failed with DDPRUN_GENERATION_SIGNAL (docs/restart_scope.md):
// tells this node's running workers of each new generation of their round,
// whichever node replaced a rank, by a signal they opted into.
//
// A generation is announced by this node's replacement (as it starts it) or
// by the rendezvous (a heartbeat's answer: another node's replacement). The
// workers are signalled once the workers' store shows that generation's
// number, so a worker that reads "/ddprun/generation" on the signal finds
// it: the rendezvous hands a generation out before the replacing node has
// written it. The store is looked at every `poll` until `timeout` (past it
// the notice is dropped with a warning; the workers' own failed
// collectives still tell them). A generation at or below one already
// signalled is ignored, so each is signalled once, whichever way it came
// first; a newer one announced meanwhile supersedes a pending one.
//
// Confined to the agent's loop thread; `loop` and `store` must outlive it.
class GenerationNotice {
 public:
  struct Options {
    std::chrono::milliseconds poll{20};
    std::chrono::milliseconds timeout{120000};
  };
  // Signals the running workers that started in a generation before
  // `generation` (a replacement that starts in it already knows).
  using SignalWorkers = std::function<void(int64_t generation)>;

  GenerationNotice(Options options, EventLoop* loop, WorkerStore* store,
                   SignalWorkers signal);
  ~GenerationNotice();
  GenerationNotice(const GenerationNotice&) = delete;
  GenerationNotice& operator=(const GenerationNotice&) = delete;

  // Round `round`'s workers start at generation 0; anything pending is
  // dropped.
  void StartGroup(int64_t round);
  // The group stops: nothing more is signalled until StartGroup.
  void Stop();
  // Round `round` handed out `generation` (ignored for another round).
  void Announce(int64_t round, int64_t generation);

 private:
  void Check();

  const Options options_;
  EventLoop* const loop_;
  WorkerStore* const store_;
  const SignalWorkers signal_;

  int64_t round_ = -1;  // -1: stopped
  int64_t signalled_ = 0;
  int64_t pending_ = 0;  // announced, not in the store yet (0: none)
  Clock::TimePoint deadline_{};
  EventLoop::TimerId timer_ = 0;
  bool timer_armed_ = false;
};

}  // namespace ddprun::agent
