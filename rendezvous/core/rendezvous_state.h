#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "ddprun/v1/rendezvous.pb.h"
#include "rendezvous/core/rate_limiter.h"
#include "rendezvous/core/rendezvous_job.h"
#include "rendezvous/core/stack_board.h"
#include "rendezvous/core/successor.h"

namespace ddprun::rendezvous {

// Server-wide abuse limits. Defaults never bite a healthy job (one Join per
// round, one Heartbeat per heartbeat_interval >= 0.1 s).
struct StateLimits {
  // Jobs the server holds at once; a Join creating one more is refused.
  size_t max_jobs = 10000;
  // Join calls per node (rdzv_id + node_id + instance): burst, then rate
  // per second.
  // A rate <= 0 turns the limit off.
  double join_burst = 20;
  double join_rate_per_s = 2;
  // Heartbeat calls per node: burst, then rate per second.
  double heartbeat_burst = 50;
  double heartbeat_rate_per_s = 20;
  // Per caller address (the peer's IP: what a caller cannot change for
  // free, unlike the ids it sends), applied by the gRPC service
  // (rendezvous_service.h): every rpc together, then Status, Close,
  // Leave and Stacks each. Sized for a host running many agents (the
  // scale bench: 4096 on one address); a rate <= 0 turns one off.
  double peer_burst = 10000;
  double peer_rate_per_s = 5000;
  double status_burst = 50;
  double status_rate_per_s = 20;
  double close_burst = 20;
  double close_rate_per_s = 5;
  double leave_burst = 4096;
  double leave_rate_per_s = 100;
  double stacks_burst = 2000;
  double stacks_rate_per_s = 500;
};

// Every job of one rendezvous server, keyed by rdzv_id, plus request
// validation. This is the whole server logic without gRPC: the service layer
// maps each rpc to one call here, parks the call under a WaiterId when asked
// to, delivers the Outcomes from TakeOutcomes(), and calls Tick() when
// NextDeadline() passes.
//
// Threading: not thread-safe; the owner serialises every call.
// Errors: every method that returns a non-ok Status changed no state.
class RendezvousState {
 public:
  // `clock` must outlive this object.
  explicit RendezvousState(Clock* clock, JobDefaults defaults = {},
                           StateLimits limits = {});

  // Join(request): RESOURCE_EXHAUSTED beyond the job/node/rate limits.
  // Otherwise parks `waiter` (answer later through TakeOutcomes()) or
  // answers at once (also through TakeOutcomes()).
  Status Join(const v1::JoinRequest& request, WaiterId waiter);
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);
  // Parks `waiter`; the reply comes in Outcome::failure.
  Status ReportFailure(const v1::ReportFailureRequest& request,
                       WaiterId waiter);
  Status ReportSuccess(const v1::ReportSuccessRequest& request,
                       WaiterId waiter);
  Status Leave(const v1::LeaveRequest& request);
  StatusOr<v1::ReplaceRankResponse> ReplaceRank(
      const v1::ReplaceRankRequest& request);
  Status Close(const v1::CloseRequest& request);
  // One job, or every job at once (rdzv_id ""; tests and small servers:
  // the Status rpc pages, GetStatusPage).
  StatusOr<v1::StatusResponse> GetStatus(const std::string& rdzv_id) const;
  // Every job a page at a time: the jobs after `page_after` in id order, at
  // least one, until they hold kStatusPageCost nodes and step rates;
  // next_page_after names the last when more follow. Bounded work: the
  // service calls it under its one lock, which heartbeats wait for (a page
  // took ~60 ms on a busy 2-core machine; every job of 2000 x 64 nodes at
  // once took 1 s).
  static constexpr size_t kStatusPageCost = 4096;
  v1::StatusResponse GetStatusPage(const std::string& page_after) const;
  // The successor (ChooseSuccessor) among the live nodes of job `rdzv_id`;
  // nullopt when there is none or no such job.
  std::optional<Successor> SuccessorOf(
      const std::string& rdzv_id,
      const std::vector<std::string>& own_hosts) const;

  // Stack dumps across the job's nodes (the Stacks rpc; stack_board.h):
  // starts or joins a dump, records a node's answer, returns its state.
  // A Heartbeat of a node that has not answered the job's dump under way
  // carries it (stacks_request).
  StatusOr<v1::StacksResponse> Stacks(const v1::StacksRequest& request);
  // The latest dump of job `rdzv_id` as a poll would see it (its first
  // page), changing nothing; NOT_FOUND without one (the live view, tests,
  // the fuzzer).
  StatusOr<v1::StacksResponse> PeekStacks(const std::string& rdzv_id) const;

  // The parked call `waiter` went away; forget it (a joining node leaves).
  void CancelWaiter(WaiterId waiter);

  void Tick();
  // Earliest time Tick() has work; nullopt if none.
  std::optional<Clock::TimePoint> NextDeadline() const;
  // True (once) when a call since the last NextDeadline() may have moved
  // the next deadline earlier: the timer thread should recompute.
  bool TakeDeadlineChanged();

  // Answers for parked (or immediately answered) waiters, oldest first.
  std::vector<Outcome> TakeOutcomes();

  size_t job_count() const { return jobs_.size(); }
  // True when the nodes of every job were told their job's latest news
  // (RendezvousJob::AllHeard).
  bool AllHeard() const;

 private:
  StatusOr<RendezvousJob*> FindJob(const std::string& rdzv_id) const;
  // Returns the job, creating it from `config` if it is new; checks config.
  StatusOr<RendezvousJob*> GetOrCreate(const std::string& rdzv_id,
                                       const v1::JobConfig& config,
                                       bool* created);

  // Remembers which job parks `waiter`, unless one of the outcomes since
  // index `first_new_outcome` already answered it.
  void TrackWaiter(const std::string& rdzv_id, WaiterId waiter,
                   size_t first_new_outcome);

  // RESOURCE_EXHAUSTED "rate limit" if `limiter` refuses this node
  // (node id and instance).
  static Status CheckRate(RateLimiter* limiter, const char* rpc,
                          const std::string& rdzv_id, const v1::NodeInfo& node);

  Clock* const clock_;
  const JobDefaults defaults_;
  const StateLimits limits_;
  RateLimiter join_limiter_;
  RateLimiter heartbeat_limiter_;
  std::map<std::string, std::unique_ptr<RendezvousJob>> jobs_;
  // Stack dumps, by rdzv_id (only jobs that had one; rendezvous_state_
  // stacks.cc). A board whose job is gone is dropped by the next Stacks.
  std::map<std::string, StackBoard> boards_;
  // Worker progress by rdzv_id and node_id, from the last heartbeats;
  // dropped with the job or the node.
  struct NodeProgress {
    std::vector<v1::RankRate> ranks;
    int32_t worker_restarts = 0;
  };
  std::map<std::string, std::map<std::string, NodeProgress>> rates_;
  // Keeps a heartbeat's rates and sets the job's median in `reply`.
  void NoteRates(const v1::HeartbeatRequest& req,
                 v1::HeartbeatResponse* reply);
  // Adds each node's rates to the job's status.
  void AddRates(v1::JobStatus* job) const;
  // Adds a dump under way that `node_id` has not answered to `reply`.
  void AddStacksRequest(const std::string& rdzv_id, const std::string& node_id,
                        v1::HeartbeatResponse* reply) const;
  // Which job parks each waiter, for CancelWaiter.
  std::map<WaiterId, std::string> waiter_job_;
  std::vector<Outcome> outcomes_;
  bool deadline_changed_ = false;
};

}  // namespace ddprun::rendezvous
