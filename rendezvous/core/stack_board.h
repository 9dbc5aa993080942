#pragma once

#include <cstddef>
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
// complete, and one within kMinGap joins it anyway (nodes dump at most that
// often, whoever asks). A node answers in parts (each request is at most
// 64 KiB); it has answered with its last part. Plain C++: time comes from
// the caller; not thread-safe.
//
// Memory is bounded: at most kMaxBytes of ranks per job (what does not fit
// is kept as a rank with `missing` set and no stack, so a diagnosis names
// it instead of losing it) and kMaxRanksPerNode ranks per node.
class StackBoard {
 public:
  static constexpr Clock::Duration kAskWindow = std::chrono::seconds(10);
  static constexpr Clock::Duration kMinGap = std::chrono::seconds(2);
  static constexpr size_t kMaxBytes = size_t{64} << 20;
  static constexpr size_t kMaxRanksPerNode = 65536;
  // A response carries ranks up to about this many bytes (a page), and
  // missing nodes up to about as many: far below gRPC's 4 MB default.
  static constexpr size_t kPageBytes = size_t{1} << 20;

  // Starts a dump (returns its id, counting from 1), or returns the id of
  // the latest: younger than kAskWindow and not complete against
  // `running`, or younger than kMinGap.
  uint64_t Start(const std::string& reason,
                 const std::vector<BoardNode>& running, Clock::TimePoint now);
  // Part `part` of node `node_id`'s answer to dump `id`: part 0 replaces
  // the node's earlier answer, part k > 0 adds to it and must follow part
  // k - 1 (else FAILED_PRECONDITION); `more` = more parts follow. NOT_FOUND
  // when `id` is not the latest dump; INVALID_ARGUMENT beyond
  // kMaxRanksPerNode. Changes nothing on error.
  Status Answer(uint64_t id, const std::string& node_id, uint32_t part,
                bool more, std::vector<v1::RankStack> ranks);
  // A whole answer in one part.
  Status Answer(uint64_t id, const std::string& node_id,
                std::vector<v1::RankStack> ranks) {
    return Answer(id, node_id, 0, false, std::move(ranks));
  }
  // The dump `node_id` must be told of in its heartbeat (its reason in
  // *reason), 0 when there is none: no dump, answered, or older than
  // kAskWindow.
  uint64_t PendingFor(const std::string& node_id, Clock::TimePoint now,
                      std::string* reason) const;
  // Dump `id` against the nodes of the running round: complete when each of
  // `running` has answered all its parts; the ranks (sorted by rank) from
  // index `ranks_from` on, one page. NOT_FOUND when `id` is not the latest
  // dump.
  StatusOr<v1::StacksResponse> Get(uint64_t id,
                                   const std::vector<BoardNode>& running,
                                   uint32_t ranks_from = 0) const;

  // Bytes of the ranks kept with their stacks (at most kMaxBytes).
  size_t bytes() const { return bytes_; }
  // The latest dump's id, 0 before the first.
  uint64_t latest() const { return id_; }

 private:
  struct NodeAnswer {
    std::vector<v1::RankStack> ranks;
    uint32_t next_part = 0;
    bool complete = false;
    size_t bytes = 0;
  };
  bool Complete(const std::vector<BoardNode>& running) const;
  bool Answered(const std::string& node_id) const;

  uint64_t id_ = 0;  // 0: none yet
  std::string reason_;
  Clock::TimePoint started_{};
  std::map<std::string, NodeAnswer> answers_;
  size_t bytes_ = 0;
  size_t rank_count_ = 0;
};

}  // namespace ddprun::rendezvous
