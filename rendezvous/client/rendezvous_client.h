#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "diagnosis/stack_summary.h"

namespace ddprun::rendezvous {

// What one agent says when it joins a rendezvous round.
struct JoinRequest {
  std::string run_id;   // --rdzv_id
  std::string node_id;  // unique per agent process (host:pid:random)
  std::string role = "default";
  int local_world_size = 1;  // this node's nproc_per_node
  int node_rank_hint = -1;   // --node_rank if given, else -1
  std::string local_addr;    // address other nodes reach this node at
  std::string host;          // gethostname(), for status pages ("" = none)
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  // Restart scope "failed": a spare may take a lost node's place in the
  // running round (JobConfig.replace_lost_nodes).
  bool replace_lost_nodes = false;
  // With it: how long a lost node's place stays open for a node that joins
  // when no spare waits (JobConfig.replace_wait_ms; 0: not at all).
  std::chrono::milliseconds replace_wait{0};
  // Non-empty: this node failed its health check (one line) and does not
  // join; the server counts it in the bad-host policy and Join answers
  // kFailedPrecondition.
  std::string unhealthy;
};

// A completed round, as the agent needs it to start workers.
struct RendezvousResult {
  int64_t round = 0;
  int group_rank = 0;        // GROUP_RANK: this node's rank in the round
  int group_world_size = 1;  // GROUP_WORLD_SIZE: nodes in the round
  int rank_offset = 0;       // RANK of local rank 0 (prefix sum)
  int world_size = 1;        // WORLD_SIZE: sum of local world sizes
  int role_rank_offset = 0;  // ROLE_RANK of local rank 0
  int role_world_size = 1;   // ROLE_WORLD_SIZE
  std::string master_addr;   // MASTER_ADDR for the workers
  int master_port = 0;       // MASTER_PORT, verified free by its owner
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT (job-global)
  // > 0: this node takes a lost node's place in the running round; its
  // workers start as replacements in this generation.
  int64_t replaces_generation = 0;
  // No round: the job succeeded while this node waited to join (a spare
  // beyond max_nodes). The other fields are unset; the agent ends with
  // success without starting workers.
  bool job_succeeded = false;
};

// Asynchronous news from the rendezvous while workers run.
enum class RendezvousEventType {
  kMembershipChanged,  // a node waits to join or was lost: restart the
                       // group without spending the restart budget
  kRestartRequested,   // another node's workers failed: restart (the
                       // budget was spent by the reporter)
  kJobFailed,          // the job ended in failure elsewhere: stop, exit != 0
  kConnectionLost,     // the rendezvous is unreachable beyond its deadline
};

struct RendezvousEvent {
  RendezvousEventType type;
  std::string reason;  // one human-readable line
};

// A stack dump across the job's nodes, as far as it got.
struct StacksAnswer {
  uint64_t request_id = 0;
  std::string reason;
  bool complete = false;  // every node of the running round answered
  std::vector<diagnosis::StackSummary> ranks;  // sorted by rank
  std::vector<std::string> missing_nodes;  // "node_id (addr)"
};

// One worker's training progress (the straggler check, status pages), as
// heartbeats carry it (rendezvous.proto, RankRate).
struct RankStepRate {
  int rank = 0;
  int64_t steps = 0;
  double per_s = -1;  // < 0: not known yet
  int local_rank = 0;
  int pid = 0;  // 0 = not known
  enum class State { kRunning, kSucceeded, kFailed, kStopped };
  State state = State::kRunning;
  bool straggler = false;   // the agent's straggler check flags it now
  int64_t total_steps = 0;  // 0 = not reported by the worker
  // What the worker reported beside its count (loss, samples_per_s, ...),
  // at most 8, names of [A-Za-z0-9_.:/-], finite values (the server
  // refuses others).
  std::vector<std::pair<std::string, double>> scalars;
};

// The agent's view of a rendezvous backend (local, gRPC).
//
// Asynchronous: every call returns at once and never blocks on the
// network. Its `done` runs exactly once, later (never inside the call), on
// the EventLoop the implementation was created with; a client destroyed
// first runs no more callbacks. Calls, SetEventHandler and destruction
// belong to that loop's thread (destruction may also follow the loop's
// end). At most one Join, ReportFailure or ReportSuccess is in flight.
class RendezvousClient {
 public:
  using EventHandler = std::function<void(const RendezvousEvent&)>;
  using JoinDone = std::function<void(StatusOr<RendezvousResult>)>;
  // true: the job restarts (the budget had room; one unit is spent).
  using FailureDone = std::function<void(StatusOr<bool> will_restart)>;
  using Done = std::function<void(Status)>;

  virtual ~RendezvousClient() = default;

  // "standalone", "static", "grpc" ... for logs.
  virtual std::string Backend() const = 0;

  // Joins the next round. `done` gets the round once it completes, a
  // result with job_succeeded when the job succeeded without this node,
  // kDeadlineExceeded when `deadline` passes, kCancelled after Leave(), or
  // kFailedPrecondition / kAborted with a clear message when the job is
  // closed or failed. A backend whose server decides the join timeout may
  // answer a little past `deadline` with the server's verdict, so that
  // every node reports the same reason.
  virtual void Join(const JoinRequest& request, Clock::TimePoint deadline,
                    JoinDone done) = 0;

  // Installs the handler for events that arrive while workers run; it runs
  // on the loop. Null: none.
  virtual void SetEventHandler(EventHandler handler) = 0;

  // This node's workers failed in `round`. `done` gets true when the job
  // will restart (the job-global restart budget had room; it is now spent
  // by one), false when the budget is exhausted and the job has failed.
  // `retry` false: the failure is deterministic (a usage error), the job
  // fails now without spending the budget (false). Bounded by the
  // backend's RPC timeout.
  virtual void ReportFailure(int64_t round, const std::string& reason,
                             bool retry, FailureDone done) = 0;

  // Restart scope "failed" (docs/restart_scope.md): one worker of this
  // node, global `rank`, failed in `round` and the node would replace it
  // alone while the round goes on; `generation` is the node's own next
  // number. `done` gets replaced = true when one unit of the job-global
  // restart budget was spent for it, with the generation to start it in
  // (the server's; 0: the backend does not hand them out, use your own);
  // replaced = false when none is left or another rank is still healing
  // (healing_rank; nothing changed: the node restarts its group); or an
  // error (kUnimplemented: a backend or server without it): the node
  // restarts its group instead. Bounded by the backend's RPC timeout.
  struct ReplaceAnswer {
    bool replaced = false;
    int64_t generation = 0;
    int healing_rank = -1;
  };
  using ReplaceDone = std::function<void(StatusOr<ReplaceAnswer> answer)>;
  virtual void ReplaceRank(int64_t round, int rank, int64_t generation,
                           const std::string& reason, ReplaceDone done) = 0;
  // That replacement healed after `seconds` (for status pages); best
  // effort, no answer.
  virtual void ReportHealed(int64_t round, int rank, int64_t generation,
                            double seconds) {}

  // This node's workers all succeeded in `round`. `done` runs once every
  // node of the round has succeeded (exit barrier), or with
  // kDeadlineExceeded once `barrier_timeout` passes (the local result still
  // stands), or with kCancelled after Leave().
  virtual void ReportSuccess(int64_t round, Clock::Duration barrier_timeout,
                             Done done) = 0;

  // Leaves the job (the agent stops on a signal): cancels the call in
  // flight (its `done` gets kCancelled), stops heartbeats and tells the
  // server, best effort; `done` runs when that is over (at most ~2 s).
  virtual void Leave(std::function<void()> done) = 0;

  // Stack dumps across nodes (the Stacks rpc). Backends without other
  // nodes to ask (local) have none: SupportsStacks() false, the handler is
  // never called, AnswerStacks does nothing and GatherStacks answers
  // kUnimplemented at once (inside the call).
  using StacksRequestHandler =
      std::function<void(uint64_t request_id, const std::string& reason)>;
  using StacksDone = std::function<void(StatusOr<StacksAnswer>)>;
  virtual bool SupportsStacks() const { return false; }
  // Runs on the loop when the server asks this node for its workers'
  // stacks (a dump another node or an operator started); the agent
  // collects them and calls AnswerStacks(request_id, ...). Null: none.
  virtual void SetStacksRequestHandler(StacksRequestHandler handler) {}
  // Restart scope "failed": runs on the loop when a heartbeat's answer
  // shows that round `round` (the one this node runs) handed out
  // `generation`, a replacement on any node of it, newer than any this
  // client passed before (HeartbeatResponse.generation). Backends without
  // other nodes never call it (this node made every generation itself).
  using GenerationHandler =
      std::function<void(int64_t round, int64_t generation)>;
  virtual void SetGenerationHandler(GenerationHandler handler) {}
  // This node's answer to dump `request_id`: calls of at most 64 KiB each
  // (parts), bounded by the RPC timeout, best effort (a failure is
  // logged).
  virtual void AnswerStacks(uint64_t request_id,
                            std::vector<diagnosis::StackSummary> ranks) {}
  // Starts a dump across the job's nodes (or joins the one under way) with
  // this node's `own` ranks as its answer, then polls until every node of
  // the running round has answered or `deadline` passes, then reads the
  // dump's ranks page by page (at most 1 s more): `done` gets what was
  // collected (complete false at the deadline; ranks whose page could not
  // be read are named in missing_nodes), or the error of the first call.
  // Step rates: this node's ranks' rates go with every later heartbeat
  // (Status shows them); JobMedianStepRate() is the median over the job's
  // ranks from the last heartbeat's answer, <= 0 when none is known (and
  // always for backends without other nodes). Loop thread.
  virtual void SetStepRates(std::vector<RankStepRate> rates) {}
  // How many times this agent restarted its worker group; goes with every
  // later heartbeat (HeartbeatRequest.worker_restarts). Loop thread.
  virtual void SetWorkerRestarts(int restarts) {}
  virtual double JobMedianStepRate() const { return -1; }

  virtual void GatherStacks(const std::string& reason,
                            std::vector<diagnosis::StackSummary> own,
                            Clock::TimePoint deadline, StacksDone done) {
    done(Status(StatusCode::kUnimplemented,
                Backend() + " rendezvous has no stack dumps across nodes"));
  }
};

}  // namespace ddprun::rendezvous
