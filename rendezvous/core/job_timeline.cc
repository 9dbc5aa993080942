#include "rendezvous/core/job_timeline.h"

#include <algorithm>
#include <cctype>

namespace ddprun::rendezvous {

v1::JobEvent& JobTimeline::Add(v1::JobEvent::Kind kind, int64_t round,
                               const std::string& reason) {
  if (events_.size() == kMaxEvents) events_.pop_front();
  v1::JobEvent& e = events_.emplace_back();
  e.set_kind(kind);
  e.set_round(round);
  e.set_reason(reason);
  e.set_unix_time(clock_->WallSeconds());
  return e;
}

void JobTimeline::RoundComplete(int64_t round, int nodes, int world_size,
                                const std::string& reason) {
  v1::JobEvent& e = Add(v1::JobEvent::KIND_ROUND_COMPLETE, round, reason);
  e.set_nodes(nodes);
  e.set_world_size(world_size);
}

void JobTimeline::RoundEnded(int64_t round, v1::JobEvent::Cause cause,
                             const std::string& reason) {
  Add(v1::JobEvent::KIND_ROUND_ENDED, round, reason).set_cause(cause);
  ++round_ends_[cause];
}

void JobTimeline::FailureRefunded(int64_t round, const std::string& reason) {
  Add(v1::JobEvent::KIND_FAILURE_REFUNDED, round, reason);
}

void JobTimeline::Finished(int64_t round, bool succeeded,
                           const std::string& reason) {
  Add(succeeded ? v1::JobEvent::KIND_JOB_SUCCEEDED
                : v1::JobEvent::KIND_JOB_FAILED,
      round, reason);
}

void JobTimeline::RankReplaced(int64_t round, const std::string& reason) {
  Add(v1::JobEvent::KIND_RANK_REPLACED, round, reason);
}

void JobTimeline::RankHealed(int64_t round, const std::string& reason) {
  Add(v1::JobEvent::KIND_RANK_HEALED, round, reason);
}

void JobTimeline::PlaceOpen(int64_t round, const std::string& reason) {
  Add(v1::JobEvent::KIND_PLACE_OPEN, round, reason);
}

void JobTimeline::AddTo(v1::JobStatus* status) const {
  for (const v1::JobEvent& e : events_) *status->add_events() = e;
  for (const auto& [cause, n] : round_ends_) {
    v1::RoundEnds* ends = status->add_round_ends();
    ends->set_cause(cause);
    ends->set_count(n);
  }
}

std::string JobTimeline::CauseKey(v1::JobEvent::Cause cause) {
  std::string name = v1::JobEvent::Cause_Name(cause);
  const std::string prefix = "CAUSE_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return name;
}

}  // namespace ddprun::rendezvous
