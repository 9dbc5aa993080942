#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "common/clock.h"
#include "ddprun/v1/rendezvous.pb.h"

namespace ddprun::rendezvous {

// What happened to one job, for status pages (JobStatus.events and
// round_ends; `ddprun-rendezvous --http_port`'s timeline and its
// restarts-by-cause counter): rounds formed and ended with their causes,
// failures put down to a node loss, the job's end. Keeps the newest
// kMaxEvents events; the per-cause counts cover the job's whole life.
//
// Plain C++, not thread-safe: the job that owns it serialises the calls.
// Times are the clock's WallSeconds() when the call is made.
class JobTimeline {
 public:
  static constexpr size_t kMaxEvents = 64;

  // `clock` must outlive the timeline.
  explicit JobTimeline(Clock* clock) : clock_(clock) {}

  void RoundComplete(int64_t round, int nodes, int world_size,
                     const std::string& reason);
  void RoundEnded(int64_t round, v1::JobEvent::Cause cause,
                  const std::string& reason);
  void FailureRefunded(int64_t round, const std::string& reason);
  void Finished(int64_t round, bool succeeded, const std::string& reason);
  // Restart scope "failed": a rank replaced alone, its heal, and a lost
  // node's place kept open for a node that joins.
  void RankReplaced(int64_t round, const std::string& reason);
  void RankHealed(int64_t round, const std::string& reason);
  void PlaceOpen(int64_t round, const std::string& reason);

  // Appends the events (oldest first) and the per-cause counts.
  void AddTo(v1::JobStatus* status) const;

  // "worker_failure" for CAUSE_WORKER_FAILURE (how JSON and /metrics name
  // a cause).
  static std::string CauseKey(v1::JobEvent::Cause cause);

 private:
  v1::JobEvent& Add(v1::JobEvent::Kind kind, int64_t round,
                    const std::string& reason);

  Clock* const clock_;
  std::deque<v1::JobEvent> events_;
  std::map<v1::JobEvent::Cause, int64_t> round_ends_;
};

}  // namespace ddprun::rendezvous
