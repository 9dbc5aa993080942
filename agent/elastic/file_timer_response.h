#pragma once

#include <map>
#include <memory>
#include <string>

#include "agent/elastic/file_timer_pipe.h"
#include "agent/watch/hang_response.h"
#include "common/event_loop.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// torch's FileTimer server for one agent's workers
// (TORCHELASTIC_ENABLE_FILE_TIMER=1): the pipe (file_timer_pipe.h) and what
// is done when a worker's scope expires. A scope whose pid is a running
// worker and whose signal is SIGKILL kills that worker as torch reaps it (a
// worker failure), after ddprun's hang diagnosis (HangResponse::
// KillAfterStacks), unless its group is being stopped. Any other signal
// goes to the pid when it belongs to a running worker's process group; torch
// would signal any pid the pipe names, ddprun only its workers' (one
// warning otherwise).
//
// Confined to the agent's loop thread; `workers` and `hang` must outlive
// this object.
class FileTimerResponse {
 public:
  // What the response needs of the agent's current worker group.
  class Workers {
   public:
    virtual ~Workers() = default;
    // Whether the group runs (expiries are ignored otherwise), and whether
    // it is being stopped.
    virtual bool GroupRunning() const = 0;
    virtual bool GroupStopping() const = 0;
    // The local rank of the running worker whose pid is `pid`, or -1.
    virtual int RunningWorker(int pid) const = 0;
    // Why worker `local_rank` is killed, for its failure's traceback;
    // `replace` overwrites an earlier reason, else only an empty one is set.
    virtual void NoteKill(int local_rank, const std::string& why,
                          bool replace) = 0;
  };

  // Null when `env` (the agent's environment) does not enable the server
  // (FileTimerPath). Errors: the pipe cannot be made (errno in the message).
  static StatusOr<std::unique_ptr<FileTimerResponse>> Start(
      const std::map<std::string, std::string>& env, EventLoop* loop,
      Workers* workers, HangResponse* hang);

  // TORCHELASTIC_TIMER_FILE of the workers.
  const std::string& path() const { return pipe_->path(); }
  // A new worker group: torch starts a server per group, the old timers go.
  void Reset() { pipe_->Reset(); }

 private:
  FileTimerResponse(EventLoop* loop, Workers* workers, HangResponse* hang)
      : loop_(loop), workers_(workers), hang_(hang) {}
  void OnExpired(const ExpiredTimer& t);

  EventLoop* const loop_;
  Workers* const workers_;
  HangResponse* const hang_;
  std::unique_ptr<FileTimerPipe> pipe_;
};

}  // namespace ddprun::agent
