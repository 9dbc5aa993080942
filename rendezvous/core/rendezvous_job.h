#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "ddprun/v1/rendezvous.pb.h"
#include "rendezvous/core/bad_host_policy.h"
#include "rendezvous/core/job_timeline.h"
#include "rendezvous/core/restart_budget.h"

namespace ddprun::rendezvous {

// The answer to a parked call: `status`, and for a Join the assignment (or
// job_succeeded), for a ReportFailure its reply.
struct Outcome {
  WaiterId waiter = 0;
  Status status;
  v1::Assignment assignment;
  // A Join answered without a round: the job succeeded while the node
  // waited on the wait list (JoinResponse.job_succeeded).
  bool job_succeeded = false;
  v1::ReportFailureResponse failure;

  // An answer that is only a status (errors, exit barrier).
  static Outcome Of(WaiterId waiter, Status status) {
    Outcome o;
    o.waiter = waiter;
    o.status = std::move(status);
    return o;
  }
  // A completed Join.
  static Outcome Joined(WaiterId waiter, const v1::Assignment& assignment) {
    Outcome o;
    o.waiter = waiter;
    o.assignment = assignment;
    return o;
  }
  // A Join parked on the wait list of a job that succeeded.
  static Outcome JobSucceeded(WaiterId waiter) {
    Outcome o;
    o.waiter = waiter;
    o.job_succeeded = true;
    return o;
  }
};

// Defaults for JobConfig fields left 0.
struct JobDefaults {
  Clock::Duration join_timeout = std::chrono::seconds(600);
  Clock::Duration last_call_timeout = std::chrono::seconds(10);
  Clock::Duration heartbeat_timeout = std::chrono::seconds(3);
  // How long a finished (succeeded/failed) job stays visible in Status and
  // refuses Joins under its rdzv_id before the server forgets it.
  Clock::Duration finished_job_ttl = std::chrono::hours(1);
  // Nodes one job may know at once (joining, waiting, running): a Join of
  // one more is refused with RESOURCE_EXHAUSTED.
  size_t max_nodes_per_job = 4096;
  // Bad-host policy defaults for JobConfig bad_host_window_ms /
  // bad_host_cooldown_ms left 0 (bad_host_failures 0 = policy off).
  Clock::Duration bad_host_window = std::chrono::seconds(600);
  Clock::Duration bad_host_cooldown = std::chrono::seconds(300);
  // Called (under the owner's lock, before any Join of the round is
  // answered) each time a round completes; must be quick and must not call
  // back into the rendezvous. Null: nothing. An agent that serves the
  // workers' c10d store drops the previous round's keys here.
  std::function<void(const std::string& rdzv_id, int64_t round)>
      on_round_complete;
};

// The state machine of one rendezvous job: rounds, participants, wait list,
// heartbeat table; the restart budget (restart_budget.h) and the bad-host
// policy (bad_host_policy.h) are its parts. See rendezvous.proto for the
// semantics of each operation. Plain C++: no gRPC, no threads, no sleeping;
// time comes from the injected clock and advances through Tick().
//
// Threading: not thread-safe; the owner serialises every call.
// Parked calls: Join and ReportSuccess may park their WaiterId; the answer is
// appended to `out` by whichever later call (or Tick) decides it. Every
// parked waiter gets exactly one Outcome unless it is cancelled through
// CancelWaiter.
// Errors returned directly changed no state.
class RendezvousJob {
 public:
  // `config` must be validated (min <= max etc.); `clock` outlives the job.
  RendezvousJob(std::string rdzv_id, const v1::JobConfig& config,
                const JobDefaults& defaults, Clock* clock);

  const std::string& id() const { return id_; }
  const v1::JobConfig& config() const { return config_; }
  bool finished() const {
    return phase_ == Phase::kSucceeded || phase_ == Phase::kFailed;
  }
  bool HasNode(const std::string& node_id) const {
    return nodes_.count(node_id) != 0;
  }
  // OK when `node_id` is a node of the job with `instance`; NOT_FOUND when
  // it is none, ALREADY_EXISTS when another process holds it.
  Status CheckMember(const std::string& node_id, uint64_t instance) const;
  size_t node_count() const { return nodes_.size(); }
  // True when the job has no node at all and never finished: nobody waits
  // for it, so the server may forget it.
  bool abandoned() const { return !finished() && nodes_.empty(); }
  // When the job finished; meaningful only if finished().
  Clock::TimePoint finished_at() const { return finished_at_; }
  // True when every node the job knows has been told its latest news (the
  // job finished or a round ended): it made a call since (a Heartbeat, a
  // Join, a report), or a call it had parked was answered by the news. A
  // hosting agent that ends serves until then (RendezvousServer::
  // WaitUntilAllHeard), so that no other agent waits on a server that is
  // gone.
  bool AllHeard() const;

  // FAILED_PRECONDITION when `config` is not this job's (min, max, budget).
  Status CheckConfig(const v1::JobConfig& config) const;

  // Join: the answer comes now (appended to out) or later via `waiter`.
  Status Join(const v1::JoinRequest& request, WaiterId waiter,
              std::vector<Outcome>* out);
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req,
                                            std::vector<Outcome>* out);
  // Worker failure: the round ends at once (every node restarts), but the
  // budget decision waits up to heartbeat_timeout + 0.5 s: if a node of the
  // round is lost meanwhile, the failure was the node loss (collectives
  // break as soon as a peer dies, before heartbeats can tell) and no budget
  // is spent. With budget left the answer (will_restart) comes at once and
  // is refunded on a node loss; with the budget spent the answer waits,
  // except in a one-node round (nobody else to lose): it fails at once.
  Status ReportFailure(const v1::ReportFailureRequest& request, WaiterId waiter,
                       std::vector<Outcome>* out);
  Status ReportSuccess(const v1::ReportSuccessRequest& request, WaiterId waiter,
                       std::vector<Outcome>* out);
  // Restart scope "failed": spends one budget unit to replace one rank of
  // the running round and hands out its generation (replaced = false when
  // none is left, or while another replacement of the round has not
  // reported its heal: healing_rank; nothing changes then), or records
  // that a replacement healed. The round goes on.
  StatusOr<v1::ReplaceRankResponse> ReplaceRank(
      const v1::ReplaceRankRequest& request);
  Status Leave(const v1::LeaveRequest& request, std::vector<Outcome>* out);
  void Close(bool succeeded, const std::string& reason,
             std::vector<Outcome>* out);

  // Forgets a parked waiter whose call went away (client cancelled or its
  // connection dropped). A node parked in Join is removed from the job.
  // Returns false if no such waiter is parked here.
  bool CancelWaiter(WaiterId waiter, std::vector<Outcome>* out);

  // Applies every time-based rule due at Now(): last call, join timeout,
  // heartbeat expiry, incomplete rebuild after a server restart.
  void Tick(std::vector<Outcome>* out);
  // The earliest time Tick() has something to do; nullopt if none.
  std::optional<Clock::TimePoint> NextDeadline() const;
  // True (once) if a call since the last TakeDeadlineMoved() may have made
  // NextDeadline() earlier (a last call armed, a round completed or opened).
  // Heartbeats only move deadlines later and do not set it.
  bool TakeDeadlineMoved() {
    const bool moved = deadline_moved_;
    deadline_moved_ = false;
    return moved;
  }

  v1::JobStatus GetStatus() const;
  // The NodeInfo of every node the job knows alive (joining, waiting,
  // running or finished; not one a rebuild still waits for).
  std::vector<v1::NodeInfo> LiveNodes() const;

  // Rebuild after a server restart: a job created from a Heartbeat of a node
  // that runs `current`. Its round is running and waits heartbeat_timeout for
  // the other group_world_size - 1 nodes to re-register. A round re-formed
  // meanwhile (a failure report) waits for them too; those still missing at
  // the deadline are lost (a pending failure of the round is refunded).
  void AdoptRunningRound(const v1::Assignment& current);

 private:
  enum class Phase { kOpen, kRunning, kSucceeded, kFailed };
  enum class NodeState { kJoining, kWaiting, kRunning, kExpected, kSucceeded };

  struct Node {
    v1::NodeInfo info;
    NodeState state = NodeState::kJoining;
    Clock::TimePoint last_seen;
    WaiterId join_waiter = 0;
    WaiterId success_waiter = 0;
    uint64_t join_seq = 0;      // join order within the open round
    int previous_rank = -1;     // group rank in the node's last round
    v1::Assignment assignment;  // valid while kRunning / kSucceeded
    bool excluded = false;      // kWaiting for its host's cool-down
    uint64_t heard = 0;         // the last news_ this node was told
  };

  // Join and Heartbeat, without marking the node as told (their callers
  // do that once the answer is decided).
  Status JoinNode(const v1::JoinRequest& request, WaiterId waiter,
                  std::vector<Outcome>* out);
  // A Join with `unhealthy` set: one failure of the node's host in the
  // bad-host policy, and kFailedPrecondition; no node joins.
  Status ReportUnhealthy(const v1::JoinRequest& request);
  StatusOr<v1::HeartbeatResponse> HeartbeatNode(const v1::HeartbeatRequest& req,
                                                std::vector<Outcome>* out);
  Status ReportNodeFailure(const v1::ReportFailureRequest& request,
                           WaiterId waiter, std::vector<Outcome>* out);
  // Join's answer for a finished job: a node that was parked in Join when
  // the job succeeded is told so again (retry of a lost answer); any other
  // gets FAILED_PRECONDITION.
  Status AnswerFinished(const v1::NodeInfo& info, WaiterId waiter,
                        std::vector<Outcome>* out);
  // The open round takes the node, or (host `excluded`) its wait list.
  void EnterOpenRound(const v1::JoinRequest& request, WaiterId waiter,
                      bool excluded, std::vector<Outcome>* out);
  void JoinOpenRound(const v1::JoinRequest& request, WaiterId waiter,
                     std::vector<Outcome>* out);
  // Parks a node on the wait list (Join checked that there is room).
  // `excluded`: its host is in a bad-host cool-down, so it neither starts a
  // new round nor joins one until then.
  void ParkWaiting(const v1::JoinRequest& request, WaiterId waiter,
                   bool excluded, std::vector<Outcome>* out);
  bool HostExcluded(const std::string& host) const {
    return bad_hosts_.Excluded(host, clock_->Now());
  }
  // Ends cool-downs that are over and lets their parked nodes join.
  void ReleaseExcludedHosts(std::vector<Outcome>* out);
  // The job has news for its nodes (a round ended, the job finished):
  // nodes with a parked call count as told (it is answered, or goes on).
  void Announce();
  // `node_id` (with `instance`), if known, was just told the news.
  void MarkHeard(const std::string& node_id, uint64_t instance);
  // One more node of the adopted round is back (rebuild_).
  void NoteReregistered(std::vector<Outcome>* out);
  // Closes the job as succeeded when every node of the running round has
  // (and a rebuilt round has all its nodes back).
  void MaybeSucceed(std::vector<Outcome>* out);
  // Ends the running round: participants must re-join round_ + 1.
  // `cause` goes to the timeline.
  void Invalidate(v1::HeartbeatResponse::Action action,
                  v1::JobEvent::Cause cause, const std::string& reason,
                  std::vector<Outcome>* out);
  void CompleteIfReady(std::vector<Outcome>* out);
  void AnswerFailure(WaiterId waiter, bool will_restart,
                     std::vector<Outcome>* out);
  // JobConfig.replace_lost_nodes: running node `lost` (id `lost_id`) was
  // lost (`why`); a waiting spare takes its place in the running round, or
  // with replace_wait_ms the place stays open for a node that joins
  // (vacancy_). False (nothing changed) when neither can be.
  bool HandToSpare(const std::string& lost_id, const Node& lost,
                   const std::string& why, std::vector<Outcome>* out);
  // Gives `spare` (a node parked in Join) the place of the lost node
  // `place` describes: spends one budget unit (false, nothing changed,
  // when none is left) and hands out the next generation.
  struct Place {
    std::string lost_id;
    v1::Assignment assignment;
    uint32_t local_world_size = 0;
    std::string role;
    std::string why;
    // "ranks A-B", for the log and the timeline.
    std::string Ranks() const {
      return "ranks " + std::to_string(assignment.rank_offset()) + "-" +
             std::to_string(assignment.rank_offset() +
                            static_cast<int>(local_world_size) - 1);
    }
  };
  bool GivePlace(const Place& place, Node* spare, std::vector<Outcome>* out);
  // True when `node` can take `place` (same local_world_size and role, not
  // in a bad-host cool-down, parked in Join).
  static bool Fits(const Node& node, const Place& place);
  // A node joined while a place is open: it takes it. False when it does
  // not fit or no place is open.
  bool FillVacancy(Node* node, std::vector<Outcome>* out);
  // A node of round `round` was lost: settles a pending failure of it.
  // `who` names it for the log ("node 'x'").
  void OnNodeLost(int64_t round, const std::string& who,
                  std::vector<Outcome>* out);
  void Complete(std::vector<Outcome>* out);
  void Fail(const std::string& reason, std::vector<Outcome>* out);
  void Succeed(const std::string& reason, std::vector<Outcome>* out);
  void RemoveNode(std::map<std::string, Node>::iterator it, Status why,
                  std::vector<Outcome>* out);
  void ReplaceJoinWaiter(Node* node, WaiterId waiter,
                         std::vector<Outcome>* out);
  // ALREADY_EXISTS if node_id is known with another instance.
  Status CheckInstance(const std::string& node_id, uint64_t instance) const;
  Node* FindNode(const std::string& node_id, uint64_t instance);
  int CountNodes(NodeState state) const;
  // Every change of nodes_ or of a node's state goes through these three,
  // which keep counts_ exact (O(1) counts: no O(n) scan per Join).
  Node& InsertNode(const std::string& node_id, bool* inserted);
  void SetState(Node* node, NodeState state);
  std::map<std::string, Node>::iterator EraseNode(
      std::map<std::string, Node>::iterator it);
  int RunningCount() const;
  bool Expirable(const Node& node) const;
  std::string Closed() const;

  const std::string id_;
  const v1::JobConfig config_;
  const Clock::Duration join_timeout_;
  const Clock::Duration last_call_timeout_;
  const Clock::Duration heartbeat_timeout_;
  const Clock::Duration replace_wait_;  // JobConfig.replace_wait_ms
  const size_t max_nodes_;
  Clock* const clock_;
  const std::function<void(const std::string&, int64_t)> on_round_complete_;

  Phase phase_ = Phase::kOpen;
  int64_t round_ = 1;
  RestartBudget budget_;
  // Restart scope "failed" in the running round: the newest generation
  // handed out and the replacement that has not reported its heal yet
  // (-1: none). Reset when ReplaceRank first sees a new round.
  struct Replacements {
    int64_t round = 0;
    int64_t generation = 0;
    int healing_rank = -1;
    int64_t healing_generation = 0;
  };
  Replacements replacements_;
  // The place of a lost node kept open in the running round (HandToSpare
  // with replace_wait_ms) until `deadline`; ended by a node taking it, the
  // deadline (the round ends) or anything that ends the round.
  struct Vacancy {
    Place place;
    Clock::TimePoint deadline;
  };
  std::optional<Vacancy> vacancy_;
  BadHostPolicy bad_hosts_;
  JobTimeline timeline_;
  uint64_t news_ = 0;  // count of Announce()s
  // Action and reason handed to nodes of an invalidated round.
  v1::HeartbeatResponse::Action last_action_ =
      v1::HeartbeatResponse::ACTION_REJOIN;
  std::string reason_;
  // True for a round opened by Invalidate(): it may complete as soon as no
  // node of the previous round is still expected.
  bool reformed_ = false;
  Clock::TimePoint open_since_;
  Clock::TimePoint finished_at_;
  std::optional<Clock::TimePoint> last_call_deadline_;
  // After a server restart (or a failover to another hosting agent): the
  // adopted round, the nodes it had and those that re-registered so far,
  // and until when the others may. Nodes still missing then were lost in
  // that round, also when it ended meanwhile (a failure report of a
  // survivor): a pending failure of it is put down to their loss.
  struct Rebuild {
    int64_t round = 0;
    int expected = 0;
    int registered = 0;
    Clock::TimePoint deadline;
  };
  std::optional<Rebuild> rebuild_;
  uint64_t next_join_seq_ = 0;
  bool deadline_moved_ = true;
  std::map<std::string, Node> nodes_;
  int counts_[5] = {};  // nodes per NodeState
};

}  // namespace ddprun::rendezvous
