#include "rendezvous/core/stack_board.h"

#include <algorithm>

namespace ddprun::rendezvous {
namespace {

Status NotLatest(uint64_t id, uint64_t latest) {
  return NotFoundError("stack dump " + std::to_string(id) +
                       " is not the job's latest (" + std::to_string(latest) +
                       ")");
}

}  // namespace

bool StackBoard::Answered(const std::string& node_id) const {
  auto it = answers_.find(node_id);
  return it != answers_.end() && it->second.complete;
}

bool StackBoard::Complete(const std::vector<BoardNode>& running) const {
  for (const BoardNode& n : running) {
    if (!Answered(n.node_id)) return false;
  }
  return true;
}

uint64_t StackBoard::Start(const std::string& reason,
                           const std::vector<BoardNode>& running,
                           Clock::TimePoint now) {
  if (id_ != 0 && ((now - started_ < kAskWindow && !Complete(running)) ||
                   now - started_ < kMinGap)) {
    return id_;
  }
  ++id_;
  reason_ = reason;
  started_ = now;
  answers_.clear();
  bytes_ = 0;
  rank_count_ = 0;
  return id_;
}

Status StackBoard::Answer(uint64_t id, const std::string& node_id,
                          uint32_t part, bool more,
                          std::vector<v1::RankStack> ranks) {
  if (id == 0 || id != id_) return NotLatest(id, id_);
  auto it = answers_.find(node_id);
  const bool known = it != answers_.end();
  if (part > 0 &&
      (!known || it->second.complete || it->second.next_part != part)) {
    return FailedPreconditionError(
        "part " + std::to_string(part) + " of node '" + node_id +
        "''s answer to stack dump " + std::to_string(id) +
        " does not follow its part " +
        (known && !it->second.complete
             ? std::to_string(it->second.next_part - 1)
             : std::string("0 (none is open)")));
  }
  const size_t kept = part > 0 ? it->second.ranks.size() : 0;
  if (kept + ranks.size() > kMaxRanksPerNode) {
    return InvalidArgumentError("more than 65536 ranks in node '" + node_id +
                                "''s answer");
  }
  NodeAnswer fresh;
  NodeAnswer& answer = part > 0 ? it->second : fresh;
  if (part == 0 && known) {
    bytes_ -= it->second.bytes;
    rank_count_ -= it->second.ranks.size();
  }
  for (v1::RankStack& r : ranks) {
    const size_t size = r.ByteSizeLong();
    if (bytes_ + size > kMaxBytes) {
      // Named, not dropped: the diagnosis says this rank gave no stack.
      // (Such stand-ins are small and at most kMaxRanksPerNode per node.)
      r.clear_stack();
      r.set_missing(
          "not kept: the job's stack dump exceeds the server's 64 MiB bound");
    } else {
      bytes_ += size;
      answer.bytes += size;
    }
    answer.ranks.push_back(std::move(r));
  }
  rank_count_ += ranks.size();
  answer.next_part = part + 1;
  answer.complete = !more;
  if (part == 0) answers_[node_id] = std::move(fresh);
  return Status::Ok();
}

uint64_t StackBoard::PendingFor(const std::string& node_id,
                                Clock::TimePoint now,
                                std::string* reason) const {
  if (id_ == 0 || now - started_ >= kAskWindow || Answered(node_id)) {
    return 0;
  }
  if (reason != nullptr) *reason = reason_;
  return id_;
}

StatusOr<v1::StacksResponse> StackBoard::Get(
    uint64_t id, const std::vector<BoardNode>& running,
    uint32_t ranks_from) const {
  if (id == 0 || id != id_) return NotLatest(id, id_);
  v1::StacksResponse resp;
  resp.set_request_id(id_);
  resp.set_reason(reason_);
  resp.set_ranks_total(static_cast<uint32_t>(rank_count_));
  if (ranks_from < rank_count_) {
    std::vector<const v1::RankStack*> ranks;
    ranks.reserve(rank_count_);
    for (const auto& [node, answer] : answers_) {
      for (const v1::RankStack& r : answer.ranks) ranks.push_back(&r);
    }
    // Stable: equal ranks (a node claiming another's) keep node order, so
    // pages never repeat or skip one.
    std::stable_sort(ranks.begin(), ranks.end(),
                     [](const v1::RankStack* a, const v1::RankStack* b) {
                       return a->rank() < b->rank();
                     });
    size_t bytes = 0;
    size_t i = ranks_from;
    for (; i < ranks.size(); ++i) {
      const size_t size = ranks[i]->ByteSizeLong();
      if (i > ranks_from && bytes + size > kPageBytes) break;
      bytes += size;
      *resp.add_ranks() = *ranks[i];
    }
    if (i < ranks.size()) resp.set_ranks_next(static_cast<uint32_t>(i));
  }
  size_t missing_bytes = 0;
  size_t untold = 0;
  for (const BoardNode& n : running) {
    if (Answered(n.node_id)) continue;
    std::string name = n.node_id + " (" + n.addr + ")";
    if (missing_bytes + name.size() > kPageBytes) {
      ++untold;
      continue;
    }
    missing_bytes += name.size();
    resp.add_missing_nodes(std::move(name));
  }
  if (untold > 0) {
    resp.add_missing_nodes("... and " + std::to_string(untold) + " more nodes");
  }
  resp.set_complete(resp.missing_nodes_size() == 0);
  return resp;
}

}  // namespace ddprun::rendezvous
