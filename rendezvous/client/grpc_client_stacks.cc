#include <algorithm>

#include "common/logging.h"
#include "rendezvous/client/grpc_rendezvous_client_impl.h"

// GrpcRendezvousClient's stack dumps across nodes (the Stacks rpc): the
// heartbeat's request handed to the agent, its answer, and a dump this node
// starts and polls until every node answered; and the step rates its
// heartbeats carry (stragglers).
namespace ddprun::rendezvous::internal {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A node's stacks travel in one request (64 KiB at most): each rank's text
// is cut to this.
constexpr size_t kMaxStackBytes = 4096;

void ToProto(const RankStackSummary& r, v1::RankStack* out) {
  out->set_rank(r.rank);
  out->set_pid(r.pid);
  out->set_group_rank(r.group_rank);
  out->set_host(r.host.substr(0, 256));
  out->set_stack(r.stack.substr(0, kMaxStackBytes));
  out->set_missing(r.missing.substr(0, 256));
}

StacksAnswer FromProto(const v1::StacksResponse& resp) {
  StacksAnswer a;
  a.request_id = resp.request_id();
  a.reason = resp.reason();
  a.complete = resp.complete();
  for (const v1::RankStack& r : resp.ranks()) {
    a.ranks.push_back(
        {r.rank(), r.pid(), r.group_rank(), r.host(), r.stack(), r.missing()});
  }
  a.missing_nodes.assign(resp.missing_nodes().begin(),
                         resp.missing_nodes().end());
  return a;
}

}  // namespace

void GrpcRendezvousClient::OnStacksRequest(const v1::HeartbeatResponse& resp) {
  const uint64_t id = resp.stacks_request();
  if (id == 0) return;
  {
    MutexLock lock(&mu_);
    if (id == stacks_seen_) return;
    stacks_seen_ = id;
  }
  PostToLoop([this, id, reason = resp.stacks_reason()] {
    if (stacks_handler_) stacks_handler_(id, reason);
  });
}

void GrpcRendezvousClient::CallStacks(
    const v1::StacksRequest& req, Clock::TimePoint deadline,
    std::function<void(StatusOr<StacksAnswer>)> done) {
  auto rpc = std::make_shared<Rpc<v1::StacksRequest, v1::StacksResponse>>();
  rpc->req = req;
  PrepareContext(&rpc->ctx);
  rpc->ctx.set_deadline(ToSystem(
      std::min(deadline, clock_->Now() + options_.rendezvous.rpc_timeout)));
  StartCall(
      rpc,
      [this](auto* ctx, auto* q, auto* p, auto cb) {
        Stub()->async()->Stacks(ctx, q, p, std::move(cb));
      },
      [this, rpc, done = std::move(done)](grpc::Status s) {
        if (!s.ok()) {
          done(FromGrpc(s, Target()));
          return;
        }
        done(FromProto(rpc->resp));
      });
}

void GrpcRendezvousClient::AnswerStacks(uint64_t request_id,
                                        std::vector<RankStackSummary> ranks) {
  v1::StacksRequest req;
  {
    MutexLock lock(&mu_);
    if (stop_ || rdzv_id_.empty()) return;
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
  }
  req.set_instance(instance_);
  req.set_request_id(request_id);
  for (const RankStackSummary& r : ranks) ToProto(r, req.add_ranks());
  CallStacks(req, clock_->Now() + options_.rendezvous.rpc_timeout,
             [request_id](StatusOr<StacksAnswer> answer) {
               if (!answer.ok()) {
                 DDP_LOG(WARNING) << "answering stack dump " << request_id
                                  << ": " << answer.status().message();
               }
             });
}

void GrpcRendezvousClient::GatherStacks(const std::string& reason,
                                        std::vector<RankStackSummary> own,
                                        Clock::TimePoint deadline,
                                        StacksDone done) {
  v1::StacksRequest req;
  {
    MutexLock lock(&mu_);
    if (stop_ || rdzv_id_.empty()) {
      PostToLoop([done] {
        done(Status(StatusCode::kFailedPrecondition,
                    "not in a rendezvous job"));
      });
      return;
    }
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
  }
  req.set_instance(instance_);
  req.set_reason(reason.substr(0, 256));
  for (const RankStackSummary& r : own) ToProto(r, req.add_ranks());
  CallStacks(req, deadline,
             [this, deadline, done](StatusOr<StacksAnswer> answer) {
               if (!answer.ok() || answer->complete ||
                   clock_->Now() + kPollInterval >= deadline) {
                 done(std::move(answer));
                 return;
               }
               {
                 // This node answered with the request: its heartbeat
                 // need not hand the same dump to the agent again.
                 MutexLock lock(&mu_);
                 stacks_seen_ = std::max(stacks_seen_, answer->request_id);
               }
               PollStacks(answer->request_id, deadline, done);
             });
}

void GrpcRendezvousClient::SetStepRates(std::vector<RankStepRate> rates) {
  MutexLock lock(&mu_);
  rates_ = std::move(rates);
}

double GrpcRendezvousClient::JobMedianStepRate() const {
  MutexLock lock(&mu_);
  return job_median_;
}

void GrpcRendezvousClient::PollStacks(uint64_t id, Clock::TimePoint deadline,
                                      StacksDone done) {
  std::weak_ptr<char> alive = alive_;
  loop_->RunAt(clock_->Now() + kPollInterval, [this, alive, id, deadline,
                                               done] {
    if (alive.expired()) return;
    v1::StacksRequest req;
    {
      MutexLock lock(&mu_);
      req.set_rdzv_id(rdzv_id_);
    }
    req.set_request_id(id);
    CallStacks(req, deadline,
               [this, id, deadline, done](StatusOr<StacksAnswer> answer) {
                 if (!answer.ok() || answer->complete ||
                     clock_->Now() + kPollInterval >= deadline) {
                   done(std::move(answer));
                   return;
                 }
                 PollStacks(id, deadline, done);
               });
  });
}

}  // namespace ddprun::rendezvous::internal
