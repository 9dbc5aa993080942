#include "rendezvous/rendezvous_job.h"

#include <chrono>

// RendezvousJob::GetStatus: the job as the Status rpc reports it.
namespace ddprun::rendezvous {

v1::JobStatus RendezvousJob::GetStatus() const {
  v1::JobStatus s;
  s.set_rdzv_id(id_);
  *s.mutable_config() = config_;
  switch (phase_) {
    case Phase::kOpen:
      s.set_state(v1::JobStatus::STATE_OPEN);
      break;
    case Phase::kRunning:
      s.set_state(v1::JobStatus::STATE_RUNNING);
      break;
    case Phase::kSucceeded:
      s.set_state(v1::JobStatus::STATE_SUCCEEDED);
      break;
    case Phase::kFailed:
      s.set_state(v1::JobStatus::STATE_FAILED);
      break;
  }
  s.set_round(round_);
  s.set_restart_count(restart_count_);
  s.set_reason(reason_);
  const Clock::TimePoint now = clock_->Now();
  for (const auto& [id, node] : nodes_) {
    v1::NodeStatus* n = s.add_nodes();
    n->set_node_id(id);
    n->set_addr(node.info.addr());
    n->set_role(node.info.role());
    n->set_local_world_size(node.info.local_world_size());
    const bool in_round = node.state == NodeState::kRunning ||
                          node.state == NodeState::kSucceeded;
    n->set_group_rank(in_round ? node.assignment.group_rank() : -1);
    n->set_rank_offset(in_round ? node.assignment.rank_offset() : -1);
    n->set_heartbeat_age_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(now -
                                                              node.last_seen)
            .count());
    switch (node.state) {
      case NodeState::kJoining:
        n->set_state(v1::NodeStatus::STATE_JOINING);
        break;
      case NodeState::kWaiting:
        n->set_state(v1::NodeStatus::STATE_WAITING);
        break;
      case NodeState::kRunning:
        n->set_state(v1::NodeStatus::STATE_RUNNING);
        break;
      case NodeState::kExpected:
        n->set_state(v1::NodeStatus::STATE_EXPECTED);
        break;
      case NodeState::kSucceeded:
        n->set_state(v1::NodeStatus::STATE_SUCCEEDED);
        break;
    }
  }
  return s;
}

}  // namespace ddprun::rendezvous
