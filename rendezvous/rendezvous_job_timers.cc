#include "rendezvous/rendezvous_job.h"

#include <chrono>
#include <cstdio>

#include "common/logging.h"

// RendezvousJob's time-driven rules: heartbeat expiry, last call, join
// timeout, the rebuild deadline, the restart budget's decision and the end
// of bad-host cool-downs.
namespace ddprun::rendezvous {
namespace {

using Action = v1::HeartbeatResponse;

std::string Seconds(Clock::Duration d) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f s",
           std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

void RendezvousJob::Tick(std::vector<Outcome>* out) {
  if (finished()) return;
  const Clock::TimePoint now = clock_->Now();
  // Heartbeat expiry first, so that a dead node cannot complete a round.
  std::vector<std::string> lost;
  bool lost_running = false;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& node = it->second;
    if (Expirable(node) && now - node.last_seen > heartbeat_timeout_) {
      lost_running |= node.state == NodeState::kRunning;
      lost.push_back(
          "node '" + it->first + "'" +
          (node.state == NodeState::kRunning
               ? " (group rank " +
                     std::to_string(node.assignment.group_rank()) + ")"
               : "") +
          " lost: no heartbeat for " + Seconds(now - node.last_seen));
      DDP_LOG(WARNING) << "rendezvous '" << id_ << "': " << lost.back();
      if (node.state == NodeState::kExpected) {
        OnNodeLost(node.assignment.round(), "node '" + it->first + "'", out);
      }
      RemoveNode(it++, UnavailableError(lost.back()), out);
    } else {
      ++it;
    }
  }
  if (phase_ == Phase::kRunning && lost_running) {
    Invalidate(Action::ACTION_REJOIN, lost.front(), out);
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
      Invalidate(Action::ACTION_REJOIN,
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

}  // namespace ddprun::rendezvous
