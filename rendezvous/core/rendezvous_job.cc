#include "rendezvous/core/rendezvous_job.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/logging.h"
#include "rendezvous/core/rank_assignment.h"

namespace ddprun::rendezvous {
namespace {

using Action = v1::HeartbeatResponse;

Clock::Duration MsOr(uint32_t ms, Clock::Duration fallback) {
  return ms == 0 ? fallback : std::chrono::milliseconds(ms);
}

std::string Seconds(Clock::Duration d) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f s",
           std::chrono::duration<double>(d).count());
  return buf;
}

// Indexed by RendezvousJob's Phase and NodeState (same order).
constexpr v1::JobStatus::State kJobStates[] = {
    v1::JobStatus::STATE_OPEN, v1::JobStatus::STATE_RUNNING,
    v1::JobStatus::STATE_SUCCEEDED, v1::JobStatus::STATE_FAILED};
constexpr v1::NodeStatus::State kNodeStates[] = {
    v1::NodeStatus::STATE_JOINING, v1::NodeStatus::STATE_WAITING,
    v1::NodeStatus::STATE_RUNNING, v1::NodeStatus::STATE_EXPECTED,
    v1::NodeStatus::STATE_SUCCEEDED};

}  // namespace

RendezvousJob::RendezvousJob(std::string rdzv_id, const v1::JobConfig& config,
                             const JobDefaults& defaults, Clock* clock)
    : id_(std::move(rdzv_id)),
      config_(config),
      join_timeout_(MsOr(config.join_timeout_ms(), defaults.join_timeout)),
      last_call_timeout_(
          MsOr(config.last_call_timeout_ms(), defaults.last_call_timeout)),
      heartbeat_timeout_(
          MsOr(config.heartbeat_timeout_ms(), defaults.heartbeat_timeout)),
      // A place stays open at most as long as a round may wait for nodes.
      replace_wait_(std::min<Clock::Duration>(
          std::chrono::milliseconds(config.replace_wait_ms()), join_timeout_)),
      max_nodes_(defaults.max_nodes_per_job),
      clock_(clock),
      on_round_complete_(defaults.on_round_complete),
      budget_(static_cast<int>(config.max_restarts())),
      bad_hosts_(
          id_, config.bad_host_failures(),
          MsOr(config.bad_host_window_ms(), defaults.bad_host_window),
          MsOr(config.bad_host_cooldown_ms(), defaults.bad_host_cooldown)),
      timeline_(clock),
      open_since_(clock->Now()) {}

Status RendezvousJob::CheckConfig(const v1::JobConfig& c) const {
  if (c.min_nodes() != config_.min_nodes() ||
      c.max_nodes() != config_.max_nodes() ||
      c.max_restarts() != config_.max_restarts()) {
    return FailedPreconditionError(
        "job config mismatch for rdzv_id '" + id_ + "': the job has nnodes " +
        std::to_string(config_.min_nodes()) + ":" +
        std::to_string(config_.max_nodes()) + " max_restarts " +
        std::to_string(config_.max_restarts()) + ", this node asked for " +
        std::to_string(c.min_nodes()) + ":" + std::to_string(c.max_nodes()) +
        " max_restarts " + std::to_string(c.max_restarts()));
  }
  return Status::Ok();
}

std::string RendezvousJob::Closed() const {
  return "rendezvous '" + id_ + "' is closed (" +
         (phase_ == Phase::kSucceeded ? "succeeded" : "failed") +
         (reason_.empty() ? "" : ": " + reason_) + ")";
}

Status RendezvousJob::CheckInstance(const std::string& node_id,
                                    uint64_t instance) const {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && it->second.info.instance() != instance) {
    return AlreadyExistsError("node id '" + node_id +
                              "' is already used by another agent process "
                              "in rendezvous '" +
                              id_ + "'");
  }
  return Status::Ok();
}

Status RendezvousJob::CheckMember(const std::string& node_id,
                                  uint64_t instance) const {
  if (!HasNode(node_id)) {
    return NotFoundError("node '" + node_id + "' is not in rendezvous '" + id_ +
                         "'");
  }
  return CheckInstance(node_id, instance);
}

RendezvousJob::Node* RendezvousJob::FindNode(const std::string& node_id,
                                             uint64_t instance) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.info.instance() != instance) {
    return nullptr;
  }
  return &it->second;
}

int RendezvousJob::CountNodes(NodeState state) const {
  return counts_[static_cast<int>(state)];
}

RendezvousJob::Node& RendezvousJob::InsertNode(const std::string& node_id,
                                               bool* inserted) {
  auto [it, fresh] = nodes_.try_emplace(node_id);
  if (fresh) ++counts_[static_cast<int>(it->second.state)];
  if (inserted != nullptr) *inserted = fresh;
  return it->second;
}

void RendezvousJob::SetState(Node* node, NodeState state) {
  --counts_[static_cast<int>(node->state)];
  ++counts_[static_cast<int>(state)];
  node->state = state;
}

std::map<std::string, RendezvousJob::Node>::iterator RendezvousJob::EraseNode(
    std::map<std::string, Node>::iterator it) {
  --counts_[static_cast<int>(it->second.state)];
  return nodes_.erase(it);
}

int RendezvousJob::RunningCount() const {
  return CountNodes(NodeState::kRunning) + CountNodes(NodeState::kSucceeded);
}

// A node parked in Join is kept alive by its open call (a dead client's call
// is cancelled by its connection); the others must heartbeat.
bool RendezvousJob::Expirable(const Node& node) const {
  return node.join_waiter == 0 && node.state != NodeState::kSucceeded;
}

void RendezvousJob::ReplaceJoinWaiter(Node* node, WaiterId waiter,
                                      std::vector<Outcome>* out) {
  if (node->join_waiter != 0 && node->join_waiter != waiter) {
    out->push_back(Outcome::Of(
        node->join_waiter, AbortedError("superseded by a newer Join of node '" +
                                        node->info.node_id() + "'")));
  }
  node->join_waiter = waiter;
}

Status RendezvousJob::Join(const v1::JoinRequest& request, WaiterId waiter,
                           std::vector<Outcome>* out) {
  if (!request.unhealthy().empty()) return ReportUnhealthy(request);
  Status joined = JoinNode(request, waiter, out);
  if (joined.ok())
    MarkHeard(request.node().node_id(), request.node().instance());
  return joined;
}

Status RendezvousJob::ReportUnhealthy(const v1::JoinRequest& request) {
  const v1::NodeInfo& info = request.node();
  DDP_LOG(WARNING) << "rendezvous '" << id_ << "': node '" << info.node_id()
                   << "' (" << info.addr()
                   << ") failed its health check and does not join: "
                   << request.unhealthy();
  if (!finished() && bad_hosts_.RecordFailure(info.addr(), clock_->Now())) {
    deadline_moved_ = true;
  }
  return FailedPreconditionError(
      "node '" + info.node_id() + "' did not join rendezvous '" + id_ +
      "': its health check failed: " + request.unhealthy());
}

Status RendezvousJob::JoinNode(const v1::JoinRequest& request, WaiterId waiter,
                               std::vector<Outcome>* out) {
  const v1::NodeInfo& info = request.node();
  if (finished()) return AnswerFinished(info, waiter, out);
  DDP_RETURN_IF_ERROR(CheckInstance(info.node_id(), info.instance()));
  auto it = nodes_.find(info.node_id());
  const bool known = it != nodes_.end();
  if (!known && nodes_.size() >= max_nodes_) {
    return ResourceExhaustedError(
        "rendezvous '" + id_ + "' already has " + std::to_string(max_nodes_) +
        " nodes (the server's --max_nodes_per_job); node '" + info.node_id() +
        "' refused");
  }
  const bool excluded = HostExcluded(info.addr());
  const bool participant = known && (it->second.state == NodeState::kRunning ||
                                     it->second.state == NodeState::kSucceeded);
  // Where the node goes: the open round, or the wait list (its host is
  // excluded, or a round runs without it). Every refusal comes before the
  // first change of state.
  const bool to_wait_list = phase_ == Phase::kOpen ? excluded : !participant;
  if (!known && to_wait_list &&
      CountNodes(NodeState::kWaiting) >=
          static_cast<int>(config_.max_nodes())) {
    return ResourceExhaustedError(
        "rendezvous '" + id_ + "': the wait list is full (" +
        std::to_string(config_.max_nodes()) + " nodes already wait)");
  }
  // A restarted server learns the job's history from the joiners.
  const int64_t seen = request.previous().round();
  if (!known && rebuild_ && seen == rebuild_->round) {
    NoteReregistered(out);  // it re-joins instead of re-registering
  }
  if (phase_ == Phase::kOpen && seen >= round_) {
    round_ = seen + 1;
    budget_.RaiseTo(request.previous().restart_count());
  }
  if (phase_ == Phase::kOpen) {
    EnterOpenRound(request, waiter, excluded, out);
    return Status::Ok();
  }

  // The round runs.
  if (participant && seen < round_) {
    // A retried Join whose answer was lost: the same assignment again.
    out->push_back(Outcome::Joined(waiter, it->second.assignment));
    return Status::Ok();
  }
  if (participant) {
    // The node left its running round on its own: everyone re-forms.
    Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_NODE_REJOINED,
               "node '" + info.node_id() + "' re-joined, leaving round " +
                   std::to_string(round_),
               out);
    EnterOpenRound(request, waiter, excluded, out);
    return Status::Ok();
  }
  ParkWaiting(request, waiter, excluded, out);
  return Status::Ok();
}

Status RendezvousJob::AnswerFinished(const v1::NodeInfo& info, WaiterId waiter,
                                     std::vector<Outcome>* out) {
  auto it = nodes_.find(info.node_id());
  if (phase_ == Phase::kSucceeded && it != nodes_.end() &&
      it->second.info.instance() == info.instance() &&
      (it->second.state == NodeState::kWaiting ||
       it->second.state == NodeState::kJoining)) {
    // A node whose parked Join was answered job_succeeded while it was away
    // (a retry after a lost connection): the same answer again.
    out->push_back(Outcome::JobSucceeded(waiter));
    return Status::Ok();
  }
  return FailedPreconditionError(Closed());
}

void RendezvousJob::ParkWaiting(const v1::JoinRequest& request, WaiterId waiter,
                                bool excluded, std::vector<Outcome>* out) {
  const v1::NodeInfo& info = request.node();
  Node& node = InsertNode(info.node_id(), nullptr);
  node.info = info;
  SetState(&node, NodeState::kWaiting);
  node.last_seen = clock_->Now();
  node.excluded = excluded;
  ReplaceJoinWaiter(&node, waiter, out);
  if (excluded) {
    DDP_LOG(WARNING) << "rendezvous '" << id_ << "': node '" << info.node_id()
                     << "' waits: host " << info.addr()
                     << " is excluded (bad-host cool-down)";
    // It may have been the last node a re-formed round waited for.
    CompleteIfReady(out);
    return;
  }
  if (FillVacancy(&node, out)) return;
  if (RunningCount() < static_cast<int>(config_.max_nodes())) {
    // Scale up: the running nodes re-join at the round boundary, without
    // spending the restart budget.
    Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_NODE_JOINED,
               "node '" + info.node_id() + "' is waiting to join", out);
  }
  // Otherwise the round is full: the node stays as a spare for the next one.
}

void RendezvousJob::EnterOpenRound(const v1::JoinRequest& request,
                                   WaiterId waiter, bool excluded,
                                   std::vector<Outcome>* out) {
  if (excluded) {
    ParkWaiting(request, waiter, true, out);
  } else {
    JoinOpenRound(request, waiter, out);
  }
}

void RendezvousJob::JoinOpenRound(const v1::JoinRequest& request,
                                  WaiterId waiter, std::vector<Outcome>* out) {
  const v1::NodeInfo& info = request.node();
  bool inserted = false;
  Node& node = InsertNode(info.node_id(), &inserted);
  if (inserted && request.previous().round() > 0) {
    node.previous_rank = request.previous().group_rank();
  }
  node.info = info;
  node.excluded = false;
  SetState(&node, NodeState::kJoining);
  node.last_seen = clock_->Now();
  node.join_seq = next_join_seq_++;
  ReplaceJoinWaiter(&node, waiter, out);
  CompleteIfReady(out);
}

void RendezvousJob::CompleteIfReady(std::vector<Outcome>* out) {
  if (phase_ != Phase::kOpen) return;
  // With the budget spent, no new round before the failure is settled.
  if (budget_.Blocking()) return;
  const int joining = CountNodes(NodeState::kJoining);
  const int min = static_cast<int>(config_.min_nodes());
  const int max = static_cast<int>(config_.max_nodes());
  if (joining >= max) {
    Complete(out);
    return;
  }
  if (joining < min) {
    last_call_deadline_.reset();
    return;
  }
  if (reformed_ && CountNodes(NodeState::kExpected) == 0 && !rebuild_) {
    // Every node known to be alive is back: no reason to wait. (After a
    // server restart, nodes that have not re-registered yet may be alive:
    // the round waits for them until the rebuild deadline.)
    Complete(out);
    return;
  }
  if (!last_call_deadline_) {
    last_call_deadline_ = clock_->Now() + last_call_timeout_;
    deadline_moved_ = true;
  }
  if (clock_->Now() >= *last_call_deadline_) Complete(out);
}

void RendezvousJob::Complete(std::vector<Outcome>* out) {
  std::vector<Node*> members;
  for (auto& [id, node] : nodes_) {
    if (node.state == NodeState::kJoining) members.push_back(&node);
  }
  std::sort(members.begin(), members.end(),
            [](Node* a, Node* b) { return a->join_seq < b->join_seq; });
  // Join order caps the round at max_nodes; later joiners wait.
  const size_t max = config_.max_nodes();
  for (size_t i = max; i < members.size(); ++i) {
    SetState(members[i], NodeState::kWaiting);
  }
  if (members.size() > max) members.resize(max);

  std::vector<RankCandidate> candidates;
  for (Node* n : members) {
    candidates.push_back({n->info.node_rank_hint(), n->previous_rank,
                          static_cast<int>(n->info.local_world_size()),
                          n->info.role()});
  }
  const std::vector<RankPlacement> placed = AssignRanks(candidates);
  int world_size = 0;
  const Node* master = nullptr;
  for (size_t i = 0; i < members.size(); ++i) {
    world_size += members[i]->info.local_world_size();
    if (placed[i].group_rank == 0) master = members[i];
  }
  const Clock::TimePoint now = clock_->Now();
  if (on_round_complete_) on_round_complete_(id_, round_);
  for (size_t i = 0; i < members.size(); ++i) {
    Node* n = members[i];
    // Whole: a node that took a lost node's place must not carry its
    // replaces_generation into a round that starts every rank afresh.
    n->assignment = v1::Assignment();
    v1::Assignment& a = n->assignment;
    a.set_round(round_);
    a.set_group_rank(placed[i].group_rank);
    a.set_group_world_size(static_cast<int>(members.size()));
    a.set_rank_offset(placed[i].rank_offset);
    a.set_world_size(world_size);
    a.set_role_rank_offset(placed[i].role_rank_offset);
    a.set_role_world_size(placed[i].role_world_size);
    a.set_master_addr(master->info.addr());
    a.set_master_port(static_cast<int>(master->info.master_port()));
    a.set_restart_count(budget_.used());
    SetState(n, NodeState::kRunning);
    n->previous_rank = placed[i].group_rank;
    n->last_seen = now;
    out->push_back(Outcome::Joined(n->join_waiter, a));
    n->join_waiter = 0;
  }
  // Nodes of the previous round that did not make it must re-join. One that
  // is merely slow keeps heartbeating; one that is dead may still turn out
  // to be the cause of a pending worker failure.
  RestartBudget::Pending* pending = budget_.pending();
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (it->second.state == NodeState::kExpected) {
      if (pending != nullptr && pending->charged) {
        pending->missing[it->first] = it->second.last_seen;
      }
      it = EraseNode(it);
    } else {
      ++it;
    }
  }
  // Every node of the failed round is back: the failure stands as a worker
  // failure.
  if (pending != nullptr && pending->missing.empty()) (void)budget_.Take();
  phase_ = Phase::kRunning;
  reformed_ = false;
  last_call_deadline_.reset();
  deadline_moved_ = true;
  const std::string complete =
      "round " + std::to_string(round_) +
      " complete: " + std::to_string(members.size()) + " nodes, world size " +
      std::to_string(world_size) + ", master " + master->info.addr() + ":" +
      std::to_string(master->info.master_port());
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' " << complete;
  timeline_.RoundComplete(round_, static_cast<int>(members.size()), world_size,
                          complete);
}

void RendezvousJob::Invalidate(v1::HeartbeatResponse::Action action,
                               v1::JobEvent::Cause cause,
                               const std::string& reason,
                               std::vector<Outcome>* out) {
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' round " << round_
                << " ends: " << reason;
  vacancy_.reset();
  timeline_.RoundEnded(round_, cause, reason);
  Announce();
  ++round_;
  phase_ = Phase::kOpen;
  reformed_ = true;
  last_action_ = action;
  reason_ = reason;
  open_since_ = clock_->Now();
  last_call_deadline_.reset();
  deadline_moved_ = true;
  for (auto& [id, node] : nodes_) {
    if (node.success_waiter != 0) {
      out->push_back(Outcome::Of(
          node.success_waiter,
          AbortedError("round " + std::to_string(round_ - 1) +
                       " ended before every node succeeded: " + reason)));
      node.success_waiter = 0;
    }
    if (node.state == NodeState::kRunning ||
        node.state == NodeState::kSucceeded) {
      SetState(&node, NodeState::kExpected);
    } else if (node.state == NodeState::kWaiting) {
      node.excluded |= HostExcluded(node.info.addr());
      if (node.excluded) continue;
      SetState(&node, NodeState::kJoining);
      node.join_seq = next_join_seq_++;
    }
  }
  CompleteIfReady(out);
}

void RendezvousJob::Fail(const std::string& reason, std::vector<Outcome>* out) {
  DDP_LOG(WARNING) << "rendezvous '" << id_ << "' failed: " << reason;
  timeline_.Finished(round_, false, reason);
  Announce();
  phase_ = Phase::kFailed;
  finished_at_ = clock_->Now();
  reason_ = reason;
  if (std::optional<RestartBudget::Pending> pending = budget_.Take()) {
    for (WaiterId w : pending->waiters) AnswerFailure(w, false, out);
    for (const std::string& id : pending->waiting_nodes) {
      if (auto it = nodes_.find(id); it != nodes_.end()) {
        it->second.heard = news_;
      }
    }
  }
  for (auto& [id, node] : nodes_) {
    for (WaiterId* w : {&node.join_waiter, &node.success_waiter}) {
      if (*w != 0) {
        out->push_back(Outcome::Of(*w, AbortedError("job failed: " + reason)));
        *w = 0;
      }
    }
  }
}

void RendezvousJob::Succeed(const std::string& reason,
                            std::vector<Outcome>* out) {
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' succeeded: " << reason;
  timeline_.Finished(round_, true, reason);
  Announce();
  phase_ = Phase::kSucceeded;
  finished_at_ = clock_->Now();
  reason_ = reason;
  for (auto& [id, node] : nodes_) {
    if (node.success_waiter != 0) {
      out->push_back(Outcome::Of(node.success_waiter, Status::Ok()));
      node.success_waiter = 0;
    }
    if (node.join_waiter != 0) {
      // A spare (or a node still joining a job closed as succeeded): there
      // is nothing left to run, and nothing went wrong.
      out->push_back(Outcome::JobSucceeded(node.join_waiter));
      node.join_waiter = 0;
    }
  }
}

void RendezvousJob::RemoveNode(std::map<std::string, Node>::iterator it,
                               Status why, std::vector<Outcome>* out) {
  Node& node = it->second;
  for (WaiterId w : {node.join_waiter, node.success_waiter}) {
    if (w != 0) out->push_back(Outcome::Of(w, why));
  }
  EraseNode(it);
}

StatusOr<v1::ReplaceRankResponse> RendezvousJob::ReplaceRank(
    const v1::ReplaceRankRequest& req) {
  if (finished()) return FailedPreconditionError(Closed());
  Node* node = FindNode(req.node_id(), req.instance());
  if (node == nullptr) {
    return NotFoundError("node '" + req.node_id() +
                         "' is not part of rendezvous '" + id_ + "'");
  }
  if (phase_ != Phase::kRunning || req.round() != round_ ||
      node->state != NodeState::kRunning) {
    return FailedPreconditionError("round " + std::to_string(req.round()) +
                                   " of rendezvous '" + id_ +
                                   "' is not running");
  }
  const v1::Assignment& a = node->assignment;
  if (req.rank() < a.rank_offset() ||
      req.rank() >= a.rank_offset() +
                        static_cast<int>(node->info.local_world_size())) {
    return InvalidArgumentError(
        "rank " + std::to_string(req.rank()) + " is not a rank of node '" +
        req.node_id() + "' in round " + std::to_string(round_));
  }
  MarkHeard(req.node_id(), req.instance());
  const std::string rank = "rank " + std::to_string(req.rank()) +
                           " (generation " + std::to_string(req.generation()) +
                           ")";
  if (replacements_.round != round_) replacements_ = Replacements{round_};
  v1::ReplaceRankResponse resp;
  if (req.healed()) {
    char secs[32];
    snprintf(secs, sizeof(secs), "%.2f", req.heal_seconds());
    timeline_.RankHealed(round_, rank + " healed in " + secs + " s");
    if (req.generation() == replacements_.healing_generation) {
      replacements_.healing_rank = -1;
    }
    resp.set_replaced(true);
  } else if (replacements_.healing_rank >= 0) {
    // A second failure while a replacement heals: the asking node restarts
    // the group (the round then ends), nothing is spent.
    resp.set_healing_rank(replacements_.healing_rank);
    resp.set_healing_generation(replacements_.healing_generation);
  } else if (budget_.TrySpend()) {
    // The agent proposes its own next number; the larger wins, so a number
    // is never handed out twice in a round, also when the agents of a
    // rebuilt server's round counted some before it.
    const int64_t generation =
        std::max(replacements_.generation + 1, req.generation());
    replacements_.generation = generation;
    replacements_.healing_rank = req.rank();
    replacements_.healing_generation = generation;
    timeline_.RankReplaced(
        round_, "rank " + std::to_string(req.rank()) + " (generation " +
                    std::to_string(generation) + ") replaced on node '" +
                    req.node_id() + "'" +
                    (req.reason().empty() ? "" : ": " + req.reason()));
    resp.set_replaced(true);
    resp.set_generation(generation);
  }
  resp.set_restart_count(budget_.used());
  return resp;
}

Status RendezvousJob::ReportSuccess(const v1::ReportSuccessRequest& req,
                                    WaiterId waiter,
                                    std::vector<Outcome>* out) {
  if (phase_ == Phase::kSucceeded) {
    out->push_back(Outcome::Of(waiter, Status::Ok()));
    return Status::Ok();
  }
  if (phase_ == Phase::kFailed) return AbortedError(Closed());
  Node* node = FindNode(req.node_id(), req.instance());
  if (node == nullptr) {
    return NotFoundError("node '" + req.node_id() +
                         "' is not part of rendezvous '" + id_ + "'");
  }
  if (phase_ != Phase::kRunning || req.round() != round_ ||
      node->state == NodeState::kExpected) {
    return FailedPreconditionError(
        "round " + std::to_string(req.round()) + " of rendezvous '" + id_ +
        "' is not running (current round " + std::to_string(round_) +
        (reason_.empty() ? "" : ", " + reason_) + ")");
  }
  SetState(node, NodeState::kSucceeded);
  node->heard = news_;
  if (node->success_waiter != 0 && node->success_waiter != waiter) {
    out->push_back(
        Outcome::Of(node->success_waiter,
                    AbortedError("superseded by a newer ReportSuccess")));
  }
  node->success_waiter = waiter;
  MaybeSucceed(out);
  return Status::Ok();
}

Status RendezvousJob::Leave(const v1::LeaveRequest& req,
                            std::vector<Outcome>* out) {
  auto it = nodes_.find(req.node_id());
  if (it == nodes_.end() || it->second.info.instance() != req.instance()) {
    return Status::Ok();  // idempotent
  }
  const bool was_running = it->second.state == NodeState::kRunning ||
                           it->second.state == NodeState::kSucceeded;
  RemoveNode(it, CancelledError("node left the rendezvous"), out);
  if (finished()) return Status::Ok();
  if (was_running && phase_ == Phase::kRunning) {
    Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_NODE_LEFT,
               "node '" + req.node_id() + "' left" +
                   (req.reason().empty() ? "" : ": " + req.reason()),
               out);
  } else {
    CompleteIfReady(out);
  }
  return Status::Ok();
}

void RendezvousJob::Close(bool succeeded, const std::string& reason,
                          std::vector<Outcome>* out) {
  if (finished()) return;
  const std::string why = reason.empty() ? "closed by request" : reason;
  if (succeeded) {
    Succeed(why, out);
  } else {
    Fail(why, out);
  }
}

bool RendezvousJob::CancelWaiter(WaiterId waiter, std::vector<Outcome>* out) {
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    Node& node = it->second;
    if (node.success_waiter == waiter) {
      node.success_waiter = 0;
      return true;
    }
    if (node.join_waiter == waiter) {
      node.join_waiter = 0;
      if (node.state == NodeState::kJoining ||
          node.state == NodeState::kWaiting) {
        EraseNode(it);
        CompleteIfReady(out);
      }
      return true;
    }
  }
  return false;
}

void RendezvousJob::MaybeSucceed(std::vector<Outcome>* out) {
  // A rebuilt round is complete only once every node re-registered: a
  // node that has not yet may still be training.
  if (phase_ != Phase::kRunning || rebuild_ ||
      CountNodes(NodeState::kRunning) != 0 || RunningCount() == 0) {
    return;
  }
  Succeed("all " + std::to_string(RunningCount()) + " nodes of round " +
              std::to_string(round_) + " succeeded",
          out);
}

// --------------------------------------------------------------------------
// RendezvousJob's worker-failure rules: the restart budget's decision
// (restart_budget.h), the node-loss refund, the bad-host charge, and failures
// that are not retried.

void RendezvousJob::AnswerFailure(WaiterId waiter, bool will_restart,
                                  std::vector<Outcome>* out) {
  Outcome o;
  o.waiter = waiter;
  o.failure.set_will_restart(will_restart);
  o.failure.set_restart_count(budget_.used());
  out->push_back(std::move(o));
}

Status RendezvousJob::ReportFailure(const v1::ReportFailureRequest& req,
                                    WaiterId waiter,
                                    std::vector<Outcome>* out) {
  Status reported = ReportNodeFailure(req, waiter, out);
  if (reported.ok()) MarkHeard(req.node_id(), req.instance());
  return reported;
}

Status RendezvousJob::ReportNodeFailure(const v1::ReportFailureRequest& req,
                                        WaiterId waiter,
                                        std::vector<Outcome>* out) {
  if (phase_ == Phase::kSucceeded) return FailedPreconditionError(Closed());
  if (phase_ == Phase::kFailed) {
    AnswerFailure(waiter, false, out);
    return Status::Ok();
  }
  if (FindNode(req.node_id(), req.instance()) == nullptr &&
      req.round() >= round_) {
    return NotFoundError("node '" + req.node_id() +
                         "' is not part of rendezvous '" + id_ + "'");
  }
  if (req.no_retry()) {
    // A usage error fails the job whatever round it is in: the next attempt
    // would fail the same way. No budget is spent.
    AnswerFailure(waiter, false, out);
    Fail("node '" + req.node_id() + "' reported a failure that is not retried" +
             (req.reason().empty() ? "" : ": " + req.reason()),
         out);
    return Status::Ok();
  }
  if (req.round() < round_) {
    // That round already ended; no second budget unit for it.
    RestartBudget::Pending* pending = budget_.pending();
    if (pending != nullptr && pending->round == req.round() &&
        !pending->charged) {
      pending->waiters.push_back(waiter);
      pending->waiting_nodes.push_back(req.node_id());
    } else {
      AnswerFailure(waiter, true, out);
    }
    return Status::Ok();
  }
  if (phase_ != Phase::kRunning || req.round() != round_) {
    return FailedPreconditionError("round " + std::to_string(req.round()) +
                                   " of rendezvous '" + id_ +
                                   "' is not running");
  }
  const std::string what = "node '" + req.node_id() +
                           "' reported a worker failure in round " +
                           std::to_string(round_) +
                           (req.reason().empty() ? "" : ": " + req.reason());
  const Clock::TimePoint now = clock_->Now();
  RestartBudget::Pending& pending = budget_.Open(
      round_, what, now + heartbeat_timeout_ + std::chrono::milliseconds(500));
  if (const Node* reporter = FindNode(req.node_id(), req.instance())) {
    pending.host = reporter->info.addr();
    pending.reported_at = now;
    if (bad_hosts_.RecordFailure(pending.host, now)) deadline_moved_ = true;
  }
  if (pending.charged) {
    AnswerFailure(waiter, true, out);
  } else {
    pending.waiters.push_back(waiter);
    pending.waiting_nodes.push_back(req.node_id());
  }
  // Only the reporter ran this round: no node loss can turn up to explain
  // the failure, so an exhausted budget is final now, not after the wait.
  const bool decide_now = !pending.charged && RunningCount() <= 1;
  deadline_moved_ = true;
  Invalidate(Action::ACTION_RESTART, v1::JobEvent::CAUSE_WORKER_FAILURE, what,
             out);
  if (decide_now) Fail(budget_.Exhausted(what), out);
  return Status::Ok();
}

void RendezvousJob::OnNodeLost(int64_t round, const std::string& who,
                               std::vector<Outcome>* out) {
  std::optional<RestartBudget::Pending> settled = budget_.Refund(round);
  if (!settled) return;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "': the worker failure in round "
                << round << " follows the loss of " << who
                << ": no restart budget spent";
  timeline_.FailureRefunded(
      round, "the worker failure in round " + std::to_string(round) +
                 " follows the loss of " + who + ": no restart budget spent");
  if (!settled->host.empty() &&
      bad_hosts_.ForgetFailure(settled->host, settled->reported_at)) {
    deadline_moved_ = true;  // its nodes are let in at the next Tick
  }
  for (WaiterId w : settled->waiters) AnswerFailure(w, true, out);
  last_action_ = Action::ACTION_REJOIN;
}

// --------------------------------------------------------------------------
// RendezvousJob's heartbeats (liveness, re-registration after a server restart,
// the news a node has not heard yet) and the bookkeeping of which node has
// heard how the job goes.

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
  if (in_round && theirs == round_ && replacements_.round == round_) {
    // Restart scope "failed": every node learns of another node's
    // replacement (DDPRUN_GENERATION_SIGNAL).
    reply.set_generation(replacements_.generation);
  }
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

// --------------------------------------------------------------------------
// RendezvousJob's time-driven rules: heartbeat expiry, last call, join timeout,
// the rebuild deadline, the restart budget's decision and the end of bad-host
// cool-downs.

bool RendezvousJob::Fits(const Node& node, const Place& place) {
  return node.state == NodeState::kWaiting && !node.excluded &&
         node.join_waiter != 0 &&
         node.info.local_world_size() == place.local_world_size &&
         node.info.role() == place.role;
}

bool RendezvousJob::HandToSpare(const std::string& lost_id, const Node& lost,
                                const std::string& why,
                                std::vector<Outcome>* out) {
  const v1::Assignment& a = lost.assignment;
  if (!config_.replace_lost_nodes() || phase_ != Phase::kRunning ||
      a.round() != round_ || a.group_rank() == 0 || vacancy_) {
    // Group rank 0's agent served the workers' store; with a place already
    // open, a second loss ends the round.
    return false;
  }
  if (replacements_.round != round_) replacements_ = Replacements{round_};
  if (replacements_.healing_rank >= 0 || !budget_.CanSpend()) return false;
  Place place{lost_id, a, lost.info.local_world_size(), lost.info.role(), why};
  Node* spare = nullptr;
  for (auto& [id, n] : nodes_) {
    if (Fits(n, place) && (spare == nullptr || n.join_seq < spare->join_seq)) {
      spare = &n;
    }
  }
  if (spare != nullptr) return GivePlace(place, spare, out);
  if (replace_wait_ <= Clock::Duration::zero()) return false;
  // No spare yet: the place stays open, and no other replacement of the
  // round starts meanwhile (its workers wait to re-form).
  replacements_.healing_rank = a.rank_offset();
  replacements_.healing_generation = 0;
  vacancy_ = Vacancy{std::move(place), clock_->Now() + replace_wait_};
  deadline_moved_ = true;
  const std::string what = "the place of node '" + lost_id + "' (" +
                           vacancy_->place.Ranks() + ") stays open " +
                           Seconds(replace_wait_) +
                           " for a node that joins: " + why;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' round " << round_ << ": "
                << what;
  timeline_.PlaceOpen(round_, what);
  return true;
}

bool RendezvousJob::FillVacancy(Node* node, std::vector<Outcome>* out) {
  if (!vacancy_ || phase_ != Phase::kRunning || !Fits(*node, vacancy_->place)) {
    return false;
  }
  const Place place = std::move(vacancy_->place);
  vacancy_.reset();
  replacements_.healing_rank = -1;
  if (GivePlace(place, node, out)) return true;
  // The budget went meanwhile: the round ends as it would have at the loss.
  Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_NODE_LOST,
             place.why +
                 " (no restart budget left to give its place to "
                 "node '" +
                 node->info.node_id() + "')",
             out);
  return true;
}

bool RendezvousJob::GivePlace(const Place& place, Node* spare,
                              std::vector<Outcome>* out) {
  if (!budget_.TrySpend()) return false;
  const v1::Assignment& a = place.assignment;
  const int64_t generation = replacements_.generation + 1;
  replacements_.generation = generation;
  replacements_.healing_rank = a.rank_offset();
  replacements_.healing_generation = generation;
  // The round's restart count, not the budget's: it names the workers'
  // store prefix.
  v1::Assignment taken = a;
  taken.set_replaces_generation(generation);
  spare->assignment = taken;
  spare->previous_rank = a.group_rank();
  spare->last_seen = clock_->Now();
  SetState(spare, NodeState::kRunning);
  out->push_back(Outcome::Joined(spare->join_waiter, taken));
  spare->join_waiter = 0;
  const std::string what = place.Ranks() + " (generation " +
                           std::to_string(generation) + ") of node '" +
                           place.lost_id + "' go to node '" +
                           spare->info.node_id() + "': " + place.why;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' round " << round_ << ": "
                << what;
  timeline_.RankReplaced(round_, what);
  return true;
}

void RendezvousJob::Tick(std::vector<Outcome>* out) {
  if (finished()) return;
  const Clock::TimePoint now = clock_->Now();
  // Heartbeat expiry first, so that a dead node cannot complete a round.
  std::vector<std::string> lost;
  bool lost_running = false;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& node = it->second;
    if (Expirable(node) && now - node.last_seen > heartbeat_timeout_) {
      lost.push_back(
          "node '" + it->first + "'" +
          (node.state == NodeState::kRunning
               ? " (group rank " +
                     std::to_string(node.assignment.group_rank()) + ")"
               : "") +
          " lost: no heartbeat for " + Seconds(now - node.last_seen));
      DDP_LOG(WARNING) << "rendezvous '" << id_ << "': " << lost.back();
      if (node.state == NodeState::kRunning &&
          (lost_running || !HandToSpare(it->first, node, lost.back(), out))) {
        lost_running = true;
      }
      if (node.state == NodeState::kExpected) {
        OnNodeLost(node.assignment.round(), "node '" + it->first + "'", out);
      }
      RemoveNode(it++, UnavailableError(lost.back()), out);
    } else {
      ++it;
    }
  }
  if (phase_ == Phase::kRunning && lost_running) {
    Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_NODE_LOST,
               lost.front(), out);
  }
  if (vacancy_ && now >= vacancy_->deadline) {
    const std::string why = vacancy_->place.why +
                            "; no node joined to take its place within " +
                            Seconds(replace_wait_);
    Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_NODE_LOST, why, out);
  }
  if (rebuild_ && now >= rebuild_->deadline) {
    const Rebuild r = *rebuild_;
    rebuild_.reset();
    const std::string missing =
        std::to_string(r.expected - r.registered) + " of the " +
        std::to_string(r.expected) + " nodes of round " +
        std::to_string(r.round) +
        " (they did not re-register after a rendezvous server restart)";
    DDP_LOG(WARNING) << "rendezvous '" << id_ << "': lost " << missing;
    if (phase_ == Phase::kRunning && round_ == r.round) {
      Invalidate(Action::ACTION_REJOIN, v1::JobEvent::CAUSE_SERVER_RESTART,
                 "after a rendezvous server restart only " +
                     std::to_string(r.registered) + " of " +
                     std::to_string(r.expected) + " nodes re-registered",
                 out);
    }
    OnNodeLost(r.round, missing, out);
  }
  if (const RestartBudget::Pending* pending = budget_.pending();
      pending != nullptr && pending->charged) {
    for (const auto& [id, seen] : pending->missing) {
      if (now - seen > heartbeat_timeout_) {
        const std::string node_id = id;  // OnNodeLost closes the decision
        DDP_LOG(WARNING) << "rendezvous '" << id_ << "': node '" << node_id
                         << "', left out of round " << round_
                         << ", lost: no heartbeat for " << Seconds(now - seen);
        OnNodeLost(pending->round, "node '" + node_id + "'", out);
        break;
      }
    }
  }
  if (const RestartBudget::Pending* pending = budget_.pending();
      pending != nullptr && now >= pending->decide_at) {
    if (pending->charged) {
      (void)budget_.Take();  // no node was lost: the charge stands
    } else {
      Fail(budget_.Exhausted(pending->reason), out);
      return;
    }
  }
  if (!bad_hosts_.empty()) ReleaseExcludedHosts(out);
  if (phase_ == Phase::kOpen) {
    CompleteIfReady(out);
    if (phase_ == Phase::kOpen && now - open_since_ >= join_timeout_) {
      const std::string reason =
          "rendezvous '" + id_ +
          "' did not reach min_nodes=" + std::to_string(config_.min_nodes()) +
          " within join_timeout " + Seconds(join_timeout_) + " (" +
          std::to_string(CountNodes(NodeState::kJoining)) + " joined)";
      for (auto& [id, node] : nodes_) {
        if (node.join_waiter != 0) {
          out->push_back(
              Outcome::Of(node.join_waiter, DeadlineExceededError(reason)));
          node.join_waiter = 0;
        }
      }
      Fail(reason, out);
    }
  }
}

void RendezvousJob::ReleaseExcludedHosts(std::vector<Outcome>* out) {
  bad_hosts_.Expire(clock_->Now());
  std::string released;
  for (auto& [id, node] : nodes_) {
    if (!node.excluded || HostExcluded(node.info.addr())) continue;
    node.excluded = false;
    released = id;
    if (phase_ == Phase::kOpen) {
      SetState(&node, NodeState::kJoining);
      node.join_seq = next_join_seq_++;
    }
  }
  if (released.empty()) return;
  if (phase_ == Phase::kOpen) {
    CompleteIfReady(out);
  } else if (phase_ == Phase::kRunning &&
             RunningCount() < static_cast<int>(config_.max_nodes())) {
    Invalidate(v1::HeartbeatResponse::ACTION_REJOIN,
               v1::JobEvent::CAUSE_NODE_JOINED,
               "node '" + released +
                   "' is waiting to join (its host's "
                   "bad-host cool-down ended)",
               out);
  }
}

std::optional<Clock::TimePoint> RendezvousJob::NextDeadline() const {
  if (finished()) return std::nullopt;
  std::optional<Clock::TimePoint> next;
  auto consider = [&next](Clock::TimePoint t) {
    if (!next || t < *next) next = t;
  };
  if (phase_ == Phase::kOpen) {
    consider(open_since_ + join_timeout_);
    if (last_call_deadline_) consider(*last_call_deadline_);
  }
  if (rebuild_) consider(rebuild_->deadline);
  if (vacancy_) consider(vacancy_->deadline);
  if (const RestartBudget::Pending* pending = budget_.pending()) {
    consider(pending->decide_at);
    for (const auto& [id, seen] : pending->missing) {
      consider(seen + heartbeat_timeout_ + std::chrono::milliseconds(1));
    }
  }
  if (std::optional<Clock::TimePoint> t = bad_hosts_.NextDeadline()) {
    consider(*t);
  }
  for (const auto& [id, node] : nodes_) {
    // An exclusion lifted by a node loss: release its nodes at the next
    // Tick.
    if (node.excluded && bad_hosts_.Tracks(node.info.addr()) &&
        !HostExcluded(node.info.addr())) {
      consider(clock_->Now());
    }
  }
  for (const auto& [id, node] : nodes_) {
    if (Expirable(node)) {
      // Strictly after the timeout, so Tick() sees the node as expired.
      consider(node.last_seen + heartbeat_timeout_ +
               std::chrono::milliseconds(1));
    }
  }
  return next;
}

// --------------------------------------------------------------------------
// RendezvousJob's rebuild after a server restart or a failover to another
// hosting agent: the job adopts the round its nodes report and waits for the
// rest of them.

void RendezvousJob::AdoptRunningRound(const v1::Assignment& current) {
  round_ = current.round();
  budget_.Adopt(current.restart_count());
  phase_ = Phase::kRunning;
  rebuild_ = Rebuild{current.round(), current.group_world_size(), 0,
                     clock_->Now() + heartbeat_timeout_};
  deadline_moved_ = true;
  reason_ = "rebuilt after a rendezvous server restart";
}

void RendezvousJob::NoteReregistered(std::vector<Outcome>* out) {
  if (!rebuild_ || ++rebuild_->registered < rebuild_->expected) return;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "' rebuilt: all "
                << rebuild_->expected << " nodes of round " << rebuild_->round
                << " re-registered";
  rebuild_.reset();
  deadline_moved_ = true;
  MaybeSucceed(out);  // every node may be in the exit barrier already
}

// --------------------------------------------------------------------------
// RendezvousJob::GetStatus: the job as the Status rpc reports it.

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
  timeline_.AddTo(&s);
  const Clock::TimePoint now = clock_->Now();
  for (const auto& [id, node] : nodes_) {
    v1::NodeStatus* n = s.add_nodes();
    n->set_node_id(id);
    n->set_addr(node.info.addr());
    n->set_host(node.info.host());
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
