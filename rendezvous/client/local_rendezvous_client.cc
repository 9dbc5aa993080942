#include "rendezvous/client/local_rendezvous_client.h"

#include "common/net.h"

namespace ddprun::rendezvous {

LocalRendezvousClient::LocalRendezvousClient(Options options, EventLoop* loop)
    : options_(std::move(options)), loop_(loop) {}

void LocalRendezvousClient::Join(const JoinRequest& request,
                                 Clock::TimePoint deadline, JoinDone done) {
  if (!request.unhealthy.empty()) {
    // One node, no server: no bad-host policy to tell.
    loop_->Post([done = std::move(done), why = request.unhealthy] {
      done(FailedPreconditionError("this node's health check failed: " + why));
    });
    return;
  }
  max_restarts_ = request.max_restarts;
  RendezvousResult result;
  result.round = next_round_++;
  result.group_rank = 0;
  result.group_world_size = 1;
  result.rank_offset = 0;
  result.world_size = request.local_world_size;
  result.role_rank_offset = 0;
  result.role_world_size = request.local_world_size;
  result.master_addr = options_.master_addr;
  result.restart_count = restarts_used_;
  StatusOr<RendezvousResult> answer = result;
  if (options_.master_port.has_value()) {
    answer->master_port = *options_.master_port;
  } else if (StatusOr<int> port = FreePort(); port.ok()) {
    answer->master_port = *port;
  } else {
    answer = port.status();
  }
  loop_->Post([done = std::move(done), answer] { done(answer); });
}

void LocalRendezvousClient::ReportFailure(int64_t round,
                                          const std::string& reason, bool retry,
                                          FailureDone done) {
  const bool restart = retry && restarts_used_ < max_restarts_;
  if (restart) ++restarts_used_;
  loop_->Post([done = std::move(done), restart] { done(restart); });
}

void LocalRendezvousClient::ReplaceRank(int64_t round, int rank,
                                        int64_t generation,
                                        const std::string& reason,
                                        ReplaceDone done) {
  // One node: the agent's own count is the job's.
  ReplaceAnswer answer;
  answer.replaced = restarts_used_ < max_restarts_;
  if (answer.replaced) ++restarts_used_;
  loop_->Post([done = std::move(done), answer] { done(answer); });
}

void LocalRendezvousClient::ReportSuccess(int64_t round,
                                          Clock::Duration barrier_timeout,
                                          Done done) {
  loop_->Post([done = std::move(done)] { done(Status::Ok()); });
}

void LocalRendezvousClient::Leave(std::function<void()> done) {
  loop_->Post(std::move(done));
}

}  // namespace ddprun::rendezvous
