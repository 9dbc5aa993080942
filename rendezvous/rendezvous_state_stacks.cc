#include "rendezvous/rendezvous_state.h"

#include <algorithm>

// RendezvousState's hang diagnosis across a job's nodes: stack dumps (the
// Stacks rpc: validation, the job's running nodes, the board of
// stack_board.h) and the step rates heartbeats carry (stragglers).
namespace ddprun::rendezvous {
namespace {

constexpr size_t kMaxStacksReasonBytes = 256;
constexpr int kMaxRanksPerAnswer = 65536;
constexpr int kMaxRates = 65536;

std::vector<BoardNode> RunningNodes(const RendezvousJob& job) {
  std::vector<BoardNode> running;
  const v1::JobStatus status = job.GetStatus();
  for (const v1::NodeStatus& n : status.nodes()) {
    if (n.state() == v1::NodeStatus::STATE_RUNNING) {
      running.push_back({n.node_id(), n.addr()});
    }
  }
  return running;
}

}  // namespace

StatusOr<v1::StacksResponse> RendezvousState::Stacks(
    const v1::StacksRequest& request) {
  // Boards of jobs the server forgot go first.
  for (auto it = boards_.begin(); it != boards_.end();) {
    it = jobs_.count(it->first) ? std::next(it) : boards_.erase(it);
  }
  if (request.rdzv_id().empty()) {
    return InvalidArgumentError("rdzv_id is empty");
  }
  if (request.reason().size() > kMaxStacksReasonBytes) {
    return InvalidArgumentError("stacks reason is longer than 256 bytes");
  }
  if (request.ranks_size() > kMaxRanksPerAnswer) {
    return InvalidArgumentError("more than 65536 ranks in one answer");
  }
  if (request.node_id().empty() && request.ranks_size() > 0) {
    return InvalidArgumentError("ranks without the node_id that sends them");
  }
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  if (!request.node_id().empty() &&
      !job->HasNode(request.node_id())) {
    return NotFoundError("node '" + request.node_id() +
                         "' is not in rendezvous '" + request.rdzv_id() + "'");
  }
  const std::vector<BoardNode> running = RunningNodes(*job);
  StackBoard& board = boards_[request.rdzv_id()];
  uint64_t id = request.request_id();
  if (id == 0) {
    if (running.empty()) {
      return FailedPreconditionError("no round of rendezvous '" +
                                     request.rdzv_id() + "' runs");
    }
    id = board.Start(request.reason().empty() ? "requested"
                                              : request.reason(),
                     running, clock_->Now());
  }
  if (!request.node_id().empty()) {
    std::vector<v1::RankStack> ranks(request.ranks().begin(),
                                     request.ranks().end());
    DDP_RETURN_IF_ERROR(board.Answer(id, request.node_id(), std::move(ranks)));
  }
  return board.Get(id, running);
}

void RendezvousState::AddStacksRequest(const std::string& rdzv_id,
                                       const std::string& node_id,
                                       v1::HeartbeatResponse* reply) const {
  auto it = boards_.find(rdzv_id);
  if (it == boards_.end()) return;
  std::string reason;
  const uint64_t id = it->second.PendingFor(node_id, clock_->Now(), &reason);
  if (id == 0) return;
  reply->set_stacks_request(id);
  reply->set_stacks_reason(reason);
}

void RendezvousState::NoteRates(const v1::HeartbeatRequest& req,
                                v1::HeartbeatResponse* reply) {
  reply->set_median_steps_per_s(-1);
  auto job = jobs_.find(req.rdzv_id());
  if (job == jobs_.end()) {
    rates_.erase(req.rdzv_id());
    return;
  }
  auto& nodes = rates_[req.rdzv_id()];
  if (req.rank_rates_size() > 0 && req.rank_rates_size() <= kMaxRates) {
    nodes[req.node().node_id()].assign(req.rank_rates().begin(),
                                       req.rank_rates().end());
  } else {
    nodes.erase(req.node().node_id());
  }
  std::vector<double> known;
  for (auto it = nodes.begin(); it != nodes.end();) {
    if (!job->second->HasNode(it->first)) {
      it = nodes.erase(it);
      continue;
    }
    for (const v1::RankRate& r : it->second) {
      if (r.steps_per_s() >= 0) known.push_back(r.steps_per_s());
    }
    ++it;
  }
  if (nodes.empty()) rates_.erase(req.rdzv_id());
  if (known.empty()) return;
  std::sort(known.begin(), known.end());
  const size_t n = known.size();
  reply->set_median_steps_per_s(
      n % 2 ? known[n / 2] : (known[n / 2 - 1] + known[n / 2]) / 2);
}

void RendezvousState::AddRates(v1::JobStatus* job) const {
  auto rates = rates_.find(job->rdzv_id());
  if (rates == rates_.end()) return;
  for (v1::NodeStatus& n : *job->mutable_nodes()) {
    auto it = rates->second.find(n.node_id());
    if (it == rates->second.end()) continue;
    for (const v1::RankRate& r : it->second) *n.add_rank_rates() = r;
  }
}

}  // namespace ddprun::rendezvous
