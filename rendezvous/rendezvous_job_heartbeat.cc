#include "rendezvous/rendezvous_job.h"

// RendezvousJob's heartbeats (liveness, re-registration after a server
// restart, the news a node has not heard yet) and the bookkeeping of which
// node has heard how the job goes. Split from rendezvous_job.cc to keep
// files small.
namespace ddprun::rendezvous {
namespace {

using Action = v1::HeartbeatResponse;

}  // namespace

StatusOr<v1::HeartbeatResponse> RendezvousJob::Heartbeat(
    const v1::HeartbeatRequest& req, std::vector<Outcome>* out) {
  StatusOr<v1::HeartbeatResponse> reply = HeartbeatNode(req, out);
  if (reply.ok()) MarkHeard(req.node().node_id(), req.node().instance());
  return reply;
}

StatusOr<v1::HeartbeatResponse> RendezvousJob::HeartbeatNode(
    const v1::HeartbeatRequest& req, std::vector<Outcome>* out) {
  const v1::NodeInfo& info = req.node();
  DDP_RETURN_IF_ERROR(CheckInstance(info.node_id(), info.instance()));
  v1::HeartbeatResponse reply;
  reply.set_action(Action::ACTION_CONTINUE);
  if (phase_ == Phase::kFailed || phase_ == Phase::kSucceeded) {
    reply.set_action(phase_ == Phase::kFailed ? Action::ACTION_JOB_FAILED
                                              : Action::ACTION_JOB_SUCCEEDED);
    reply.set_reason(Closed());
    reply.set_round(round_);
    return reply;
  }
  const int64_t theirs = req.current().round();
  Node* node = FindNode(info.node_id(), info.instance());
  if (node == nullptr && theirs == round_ && phase_ == Phase::kRunning) {
    // Rebuild after a server restart: the node re-registers its round.
    bool rank_taken = false;
    for (const auto& [id, other] : nodes_) {
      rank_taken |= other.state == NodeState::kRunning &&
                    other.assignment.group_rank() == req.current().group_rank();
    }
    if (!rank_taken) {
      Node& n = InsertNode(info.node_id(), nullptr);
      n.info = info;
      SetState(&n, NodeState::kRunning);
      n.assignment = req.current();
      n.previous_rank = req.current().group_rank();
      n.heard = news_;
      node = &n;
      NoteReregistered(out);
    }
  }
  if (node != nullptr) node->last_seen = clock_->Now();
  if (RestartBudget::Pending* pending = budget_.pending();
      node == nullptr && pending != nullptr) {
    auto missing = pending->missing.find(info.node_id());
    if (missing != pending->missing.end()) {
      missing->second = clock_->Now();  // alive: not the failure's cause
    }
  }
  reply.set_round(round_);
  reply.set_nodes_waiting(CountNodes(NodeState::kWaiting));
  const bool in_round =
      node != nullptr && (node->state == NodeState::kRunning ||
                          node->state == NodeState::kSucceeded);
  const bool joining = node != nullptr && (node->state == NodeState::kJoining ||
                                           node->state == NodeState::kWaiting);
  if (in_round || joining || theirs == 0) return reply;
  // The node runs a round that is over (or was dropped from it).
  reply.set_action(theirs == round_ - 1 ? last_action_ : Action::ACTION_REJOIN);
  reply.set_reason(node == nullptr && theirs == round_
                       ? "this node is not part of round " +
                             std::to_string(round_)
                       : reason_);
  return reply;
}

void RendezvousJob::Announce() {
  ++news_;
  for (auto& [id, node] : nodes_) {
    if (node.join_waiter != 0 || node.success_waiter != 0) node.heard = news_;
  }
}

void RendezvousJob::MarkHeard(const std::string& node_id, uint64_t instance) {
  if (Node* node = FindNode(node_id, instance)) node->heard = news_;
}

std::vector<v1::NodeInfo> RendezvousJob::LiveNodes() const {
  std::vector<v1::NodeInfo> live;
  for (const auto& [id, node] : nodes_) {
    if (node.state != NodeState::kExpected) live.push_back(node.info);
  }
  return live;
}

bool RendezvousJob::AllHeard() const {
  for (const auto& [id, node] : nodes_) {
    if (node.heard < news_) return false;
  }
  return true;
}

}  // namespace ddprun::rendezvous
