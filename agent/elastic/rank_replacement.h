#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/elastic/worker_store.h"
#include "agent/process/console.h"
#include "common/event_loop.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// The agent's half of --restart_scope failed (docs/restart_scope.md): a
// failed worker of the running group is started again alone, as a new
// generation, while every other worker of every node keeps running; the
// replacement heals from a live peer.
//
// For each failure the agent asks Replace(). With true, this class owns
// what follows: it asks the rendezvous to spend a restart (ReplaceRank),
// which hands out the generation (unique across the job's nodes), writes
// the generation record and then its number into the workers' store (its
// own, or the one another node serves), has the agent start the
// replacement (Agent::StartReplacement) once the store shows the number,
// waits for the source rank's "healed" key (polled every 50 ms, bounded by
// --heal_timeout) and prints one console line:
//   [ddprun] rank R replaced (generation G): healed from rank S in X.XX s
// The agent hears how each started replacement ended (ReplacementHealed,
// ReplacementGaveUp) and records it in the rank's files
// (replacement_record.h).
// With false, or later through Agent::RestartGroup, the agent restarts the
// group as under --restart_scope group: never a hang. Replace() answers
// false (the group restarts) when the scope is "group", this node cannot
// write the round's store, the world has a single rank (no peer to heal
// from), a replacement of this node is still healing (a second failure),
// or the failed worker is a replacement that made no step progress since
// it healed. RestartGroup comes when the rendezvous refuses (no budget
// left, a rank of another node still heals, kUnimplemented from an older
// server, an error), when starting the replacement fails, or when the
// generation does not reach the store or the heal outlives
// --heal_timeout.
//
// Confined to the agent's loop thread; callbacks of a group that stopped
// (Stop) are dropped. The collaborators must outlive it.
class RankReplacement {
 public:
  // What it needs from the agent.
  class Agent {
   public:
    virtual ~Agent() = default;
    // Starts local rank `local_rank` again with DDPRUN_GENERATION=
    // `generation` and DDPRUN_REPLACEMENT=1, other variables as its group's.
    // `reason`: the failure's one line (as given to Replace()), for the
    // agent's record of the replacement (replacement_record.h).
    virtual Status StartReplacement(int local_rank, int64_t generation,
                                    const std::string& reason) = 0;
    // The replacement of local rank `local_rank` (generation `generation`)
    // healed from rank `source` in `seconds` (from its failure).
    virtual void ReplacementHealed(int local_rank, int64_t generation,
                                   int source, double seconds) = 0;
    // The replacement StartReplacement() was asked for (whether or not it
    // started) gave up: `why`, one line. RestartGroup follows at once.
    virtual void ReplacementGaveUp(int local_rank, int64_t generation,
                                   const std::string& why) = 0;
    // Restarts the group: local rank `local_rank`'s failure (the one
    // Replace() took) becomes the group's failure; `why`: one line.
    virtual void RestartGroup(int local_rank, const std::string& why) = 0;
    // The replaced worker's step count now (its step file), -1 if unknown.
    virtual int64_t StepsOf(int local_rank) const = 0;
  };

  struct Options {
    std::chrono::milliseconds heal_timeout{120000};
  };

  // `store` null: ranks are never replaced (--restart_scope group, or a
  // mode that cannot).
  RankReplacement(Options options, EventLoop* loop,
                  rendezvous::RendezvousClient* rendezvous, WorkerStore* store,
                  Console* console, Agent* agent);
  ~RankReplacement();

  // A round's workers are about to start. `reaches_store`: this node can
  // write its store (WorkerStore::StartRound: it serves it, or reaches the
  // node that does). Resets the generation to 0.
  void StartGroup(const rendezvous::RendezvousResult& round,
                  bool reaches_store);
  // The group stops (a restart, the job's end): pending callbacks and the
  // heal wait are dropped.
  void Stop();

  // This node took a lost node's place in the running round
  // (RendezvousResult::replaces_generation, JobConfig.replace_lost_nodes):
  // writes generation `generation`'s record (every one of the node's
  // `local_world_size` ranks replaced, healed from rank 0) and number into
  // the store, has the agent start every local rank as a replacement
  // (StartReplacement with local rank -1) once the store shows it, and
  // waits for the heal as for one rank; a failure of it, or of any rank
  // before the heal, restarts the group (local rank -1). False when this
  // node cannot write the store (the caller fails the round).
  bool TakeOver(int64_t generation, int local_world_size);
  // Local rank `local_rank` (global `rank`) failed while its group runs:
  // true when it will be replaced alone (the agent keeps the others
  // running and waits); false: restart the group now. `reason`: one line.
  bool Replace(int local_rank, int rank, const std::string& reason);

  // --restart_scope failed with a store to serve.
  bool enabled() const { return store_ != nullptr; }
  // A replacement is being set up or heals.
  bool busy() const { return busy_local_rank_ >= 0 || whole_node_; }
  int64_t generation() const { return generation_; }
  // When the failure of the replacement in progress was taken (Replace).
  Clock::TimePoint failed_at() const { return heal_started_; }
  // Ranks replaced in the current group, in order (for the failure table).
  struct Replaced {
    int rank = 0;
    int64_t generation = 0;
    std::string reason;
    double heal_seconds = -1;  // -1: not healed (yet)
  };
  const std::vector<Replaced>& replaced() const { return replaced_; }

 private:
  void OnRendezvousAnswer(
      uint64_t epoch, int local_rank, int rank,
      StatusOr<rendezvous::RendezvousClient::ReplaceAnswer> answer);
  // Starts the replacement once the store shows the generation's number.
  void AwaitPublished(uint64_t epoch);
  void PollHealed(uint64_t epoch);
  void GiveUp(int local_rank, const std::string& why);
  // "rank R", or "ranks A-B" while taking a lost node's place.
  std::string Ranks() const;
  std::string Record(const std::vector<int>& ranks,
                     const std::string& reason) const;

  const Options options_;
  EventLoop* const loop_;
  rendezvous::RendezvousClient* const rendezvous_;
  WorkerStore* const store_;
  Console* const console_;
  Agent* const agent_;

  rendezvous::RendezvousResult round_;
  bool reaches_store_ = false;
  uint64_t epoch_ = 0;  // counts StartGroup/Stop: late callbacks are dropped
  int64_t generation_ = 0;
  int busy_local_rank_ = -1;  // >= 0 while busy() for one rank
  bool whole_node_ = false;   // busy() taking a lost node's place
  int whole_node_ranks_ = 0;  // its local world size
  int busy_rank_ = -1;
  int source_ = -1;
  // StartReplacement was called for the replacement in progress.
  bool started_ = false;
  Clock::TimePoint heal_started_{};
  Clock::TimePoint heal_deadline_{};
  EventLoop::TimerId poll_timer_ = 0;
  bool poll_armed_ = false;
  // By local rank: a replacement's step count when it healed.
  std::map<int, int64_t> healed_at_steps_;
  std::vector<Replaced> replaced_;
};

}  // namespace ddprun::agent
