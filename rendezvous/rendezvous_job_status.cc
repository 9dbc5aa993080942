#include "rendezvous/rendezvous_job.h"

#include <chrono>

// RendezvousJob::GetStatus: the job as the Status rpc reports it.
namespace ddprun::rendezvous {
namespace {

// Indexed by RendezvousJob's Phase and NodeState (same order).
constexpr v1::JobStatus::State kJobStates[] = {
    v1::JobStatus::STATE_OPEN, v1::JobStatus::STATE_RUNNING,
    v1::JobStatus::STATE_SUCCEEDED, v1::JobStatus::STATE_FAILED};
constexpr v1::NodeStatus::State kNodeStates[] = {
    v1::NodeStatus::STATE_JOINING, v1::NodeStatus::STATE_WAITING,
    v1::NodeStatus::STATE_RUNNING, v1::NodeStatus::STATE_EXPECTED,
    v1::NodeStatus::STATE_SUCCEEDED};

}  // namespace

v1::JobStatus RendezvousJob::GetStatus() const {
  static_assert(static_cast<int>(Phase::kFailed) == 3 &&
                    static_cast<int>(NodeState::kSucceeded) == 4,
                "keep kJobStates/kNodeStates in enum order");
  v1::JobStatus s;
  s.set_rdzv_id(id_);
  *s.mutable_config() = config_;
  s.set_state(kJobStates[static_cast<int>(phase_)]);
  s.set_round(round_);
  s.set_restart_count(budget_.used());
  s.set_reason(reason_);
  const Clock::TimePoint now = clock_->Now();
  for (const auto& [id, node] : nodes_) {
    v1::NodeStatus* n = s.add_nodes();
    n->set_node_id(id);
    n->set_addr(node.info.addr());
    n->set_role(node.info.role());
    n->set_local_world_size(node.info.local_world_size());
    n->set_state(kNodeStates[static_cast<int>(node.state)]);
    const bool in_round = node.state == NodeState::kRunning ||
                          node.state == NodeState::kSucceeded;
    n->set_group_rank(in_round ? node.assignment.group_rank() : -1);
    n->set_rank_offset(in_round ? node.assignment.rank_offset() : -1);
    n->set_heartbeat_age_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(now -
                                                              node.last_seen)
            .count());
  }
  return s;
}

}  // namespace ddprun::rendezvous
