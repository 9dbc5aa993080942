#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "ddprun/v1/rendezvous.pb.h"

namespace ddprun::rendezvous {

// A node of a running round, as a stack dump counts it.
struct BoardNode {
  std::string node_id;
  std::string addr;
};

// The stack dumps of one job (the Stacks rpc, rendezvous.proto): its latest
// request and its nodes' answers. A request stays open for answers and is
// told to the nodes that have not answered (in their heartbeats) for
// kAskWindow; a new request within that window joins it unless it is
// complete. Plain C++: time comes from the caller; not thread-safe.
class StackBoard {
 public:
  static constexpr Clock::Duration kAskWindow = std::chrono::seconds(10);

  // Starts a dump (returns its id, counting from 1), or returns the id of
  // the one under way (younger than kAskWindow and not complete against
  // `running`).
  uint64_t Start(const std::string& reason,
                 const std::vector<BoardNode>& running, Clock::TimePoint now);
  // Node `node_id`'s answer to dump `id` (a second answer replaces the
  // first). NOT_FOUND when `id` is not the latest dump.
  Status Answer(uint64_t id, const std::string& node_id,
                std::vector<v1::RankStack> ranks);
  // The dump `node_id` must be told of in its heartbeat (its reason in
  // *reason), 0 when there is none: no dump, answered, or older than
  // kAskWindow.
  uint64_t PendingFor(const std::string& node_id, Clock::TimePoint now,
                      std::string* reason) const;
  // Dump `id` against the nodes of the running round: complete when each of
  // `running` has answered; ranks sorted by rank. NOT_FOUND when `id` is
  // not the latest dump.
  StatusOr<v1::StacksResponse> Get(uint64_t id,
                                   const std::vector<BoardNode>& running) const;
  // The latest dump's id; 0 when there has been none.
  uint64_t latest() const { return id_; }

 private:
  bool Complete(const std::vector<BoardNode>& running) const;

  uint64_t id_ = 0;  // 0: none yet
  std::string reason_;
  Clock::TimePoint started_{};
  std::map<std::string, std::vector<v1::RankStack>> answers_;
};

}  // namespace ddprun::rendezvous
