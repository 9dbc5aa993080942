#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "rendezvous/rendezvous_job.h"

// RendezvousJob's bad-host policy (Horovod's blacklist): a host whose
// workers failed bad_host_failures times within bad_host_window is kept out
// of rounds for bad_host_cooldown. Hosts are keyed by NodeInfo.addr, not by
// node_id, because a restarted agent on the same host gets a new node_id.
namespace ddprun::rendezvous {

bool RendezvousJob::RecordHostFailure(const std::string& host) {
  const uint32_t limit = config_.bad_host_failures();
  if (limit == 0) return false;
  const Clock::TimePoint now = clock_->Now();
  HostRecord& record = hosts_[host];
  auto& f = record.failures;
  f.erase(f.begin(), std::find_if(f.begin(), f.end(), [&](auto t) {
            return now - t < bad_host_window_;
          }));
  f.push_back(now);
  if (f.size() < limit) return false;
  record.excluded_until = now + bad_host_cooldown_;
  f.clear();  // the cool-down pays for these failures
  deadline_moved_ = true;
  DDP_LOG(WARNING) << "rendezvous '" << id_ << "': host " << host
                   << " excluded for "
                   << std::chrono::duration<double>(bad_host_cooldown_).count()
                   << " s: " << limit << " worker failures within "
                   << std::chrono::duration<double>(bad_host_window_).count()
                   << " s";
  return true;
}

void RendezvousJob::ForgetHostFailure(const std::string& host,
                                      Clock::TimePoint at) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  HostRecord& record = it->second;
  auto& f = record.failures;
  if (auto pos = std::find(f.begin(), f.end(), at); pos != f.end()) {
    f.erase(pos);
  } else if (record.excluded_until &&
             *record.excluded_until == at + bad_host_cooldown_) {
    // This very failure excluded the host: lift the exclusion (its nodes
    // are let in at the next Tick).
    record.excluded_until.reset();
    deadline_moved_ = true;
  }
}

bool RendezvousJob::HostExcluded(const std::string& host) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && it->second.excluded_until &&
         clock_->Now() < *it->second.excluded_until;
}

void RendezvousJob::ReleaseExcludedHosts(std::vector<Outcome>* out) {
  const Clock::TimePoint now = clock_->Now();
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    HostRecord& r = it->second;
    if (r.excluded_until && now >= *r.excluded_until) {
      DDP_LOG(INFO) << "rendezvous '" << id_ << "': host " << it->first
                    << " cool-down over; its nodes may join again";
      r.excluded_until.reset();
    }
    auto& f = r.failures;
    f.erase(f.begin(), std::find_if(f.begin(), f.end(), [&](auto t) {
              return now - t < bad_host_window_;
            }));
    it = (!r.excluded_until && f.empty()) ? hosts_.erase(it) : std::next(it);
  }
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

}  // namespace ddprun::rendezvous
