#include "agent/hosting/connection_quota.h"

#include <algorithm>

namespace ddprun::agent {

bool ConnectionQuota::TryPair(uint64_t id) {
  Conn& c = conns_.at(id);
  if (c.state != State::kSilent || c.paired) return false;
  auto free = free_identified_.find(c.host);
  if (free == free_identified_.end()) return false;
  // The latest one identified before this socket came: torch 1.13 opens
  // its watch socket right after its first query is answered. Without
  // wait_for_workers (ddprun's C++ workers) there is no query before it:
  // then the first one identified after it came.
  uint64_t before = kNone, after = kNone;
  for (uint64_t other : free->second) {
    const Conn& o = conns_.at(other);
    if (o.identified_seq < c.admitted_seq) {
      if (before == kNone ||
          o.identified_seq > conns_.at(before).identified_seq) {
        before = other;
      }
    } else if (after == kNone ||
               o.identified_seq < conns_.at(after).identified_seq) {
      after = other;
    }
  }
  const uint64_t best = before != kNone ? before : after;
  if (best == kNone) return false;
  free->second.erase(best);
  if (free->second.empty()) free_identified_.erase(free);
  conns_.at(best).partner = id;
  c.partner = best;
  c.paired = true;
  unpaired_.erase(id);
  return true;
}

void ConnectionQuota::Unpair(uint64_t id) {
  Conn& c = conns_.at(id);
  if (c.partner == kNone) return;
  Conn& other = conns_.at(c.partner);
  other.partner = kNone;
  if (other.state == State::kIdentified) {
    free_identified_[other.host].insert(c.partner);
  }
  c.partner = kNone;
}

bool ConnectionQuota::PickVictim(const std::string& host,
                                 std::set<uint64_t>* evicting) const {
  for (uint64_t candidate : unpaired_) {
    if (evicting->count(candidate) > 0) continue;
    if (!host.empty() && conns_.at(candidate).host != host) continue;
    evicting->insert(candidate);
    return true;
  }
  return false;
}

ConnectionQuota::Admission ConnectionQuota::Admit(uint64_t id,
                                                  const std::string& host,
                                                  TimePoint now) {
  Admission a;
  // Room first, under each limit by closing the oldest unpaired
  // unidentified connection (of this host, for the host's limit).
  auto h = per_host_.find(host);
  const size_t from_host = h == per_host_.end() ? 0 : h->second;
  std::set<uint64_t> evicting;
  if (from_host >= limits_.max_per_host && !PickVictim(host, &evicting)) {
    a.admitted = false;
    a.refusal = std::to_string(from_host) +
                " connections from this host already (limit " +
                std::to_string(limits_.max_per_host) + "), all of them clients";
    return a;
  }
  if (conns_.size() - evicting.size() >= limits_.max_total &&
      !PickVictim("", &evicting)) {
    a.admitted = false;
    a.refusal = std::to_string(conns_.size()) + " connections already (limit " +
                std::to_string(limits_.max_total) + "), all of them clients";
    return a;
  }
  if (unpaired_.size() - evicting.size() >= limits_.max_unidentified) {
    PickVictim("", &evicting);
  }
  for (uint64_t victim : evicting) {
    a.evict.push_back(victim);
    Remove(victim);
  }
  Conn c;
  c.host = host;
  c.deadline = now + limits_.first_message_timeout;
  c.admitted_seq = ++seq_;
  conns_.emplace(id, std::move(c));
  ++per_host_[host];
  unpaired_.insert(id);
  TryPair(id);
  return a;
}

void ConnectionQuota::Spoke(uint64_t id, TimePoint now) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state != State::kSilent) return;
  Conn& c = it->second;
  c.state = State::kSpoke;
  if (c.paired) {
    // A paired socket that speaks is on its own now.
    Unpair(id);
    c.paired = false;
    c.deadline = now + limits_.first_message_timeout;
    unpaired_.insert(id);
  }
}

void ConnectionQuota::Identified(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state == State::kIdentified) return;
  Conn& c = it->second;
  Unpair(id);
  c.paired = false;
  c.state = State::kIdentified;
  c.identified_seq = ++seq_;
  unpaired_.erase(id);
  free_identified_[c.host].insert(id);
}

void ConnectionQuota::Remove(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Unpair(id);
  const Conn& c = it->second;
  auto h = per_host_.find(c.host);
  if (--h->second == 0) per_host_.erase(h);
  auto free = free_identified_.find(c.host);
  if (free != free_identified_.end()) {
    free->second.erase(id);
    if (free->second.empty()) free_identified_.erase(free);
  }
  unpaired_.erase(id);
  conns_.erase(it);
}

std::vector<ConnectionQuota::Expired> ConnectionQuota::Expire(TimePoint now,
                                                              TimePoint* next) {
  std::vector<Expired> out;
  *next = TimePoint::max();
  const std::set<uint64_t> candidates = unpaired_;
  for (uint64_t id : candidates) {
    const Conn& c = conns_.at(id);
    if (now < c.deadline) {
      *next = std::min(*next, c.deadline);
      continue;
    }
    // Its partner may have been taken, when it came, by another socket
    // that was silent for a moment and has spoken since.
    if (TryPair(id)) continue;
    const std::string within =
        " within " + std::to_string(limits_.first_message_timeout.count()) +
        " ms of connecting";
    out.push_back({id, c.state == State::kSilent
                           ? "it sent nothing" + within
                           : "its first message was not whole" + within});
    Remove(id);
  }
  return out;
}

}  // namespace ddprun::agent
