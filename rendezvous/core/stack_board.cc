#include "rendezvous/core/stack_board.h"

#include <algorithm>

namespace ddprun::rendezvous {

bool StackBoard::Complete(const std::vector<BoardNode>& running) const {
  for (const BoardNode& n : running) {
    if (answers_.count(n.node_id) == 0) return false;
  }
  return true;
}

uint64_t StackBoard::Start(const std::string& reason,
                           const std::vector<BoardNode>& running,
                           Clock::TimePoint now) {
  if (id_ != 0 && now - started_ < kAskWindow && !Complete(running)) {
    return id_;
  }
  ++id_;
  reason_ = reason;
  started_ = now;
  answers_.clear();
  return id_;
}

Status StackBoard::Answer(uint64_t id, const std::string& node_id,
                          std::vector<v1::RankStack> ranks) {
  if (id == 0 || id != id_) {
    return NotFoundError("stack dump " + std::to_string(id) +
                         " is not the job's latest (" + std::to_string(id_) +
                         ")");
  }
  answers_[node_id] = std::move(ranks);
  return Status::Ok();
}

uint64_t StackBoard::PendingFor(const std::string& node_id,
                                Clock::TimePoint now,
                                std::string* reason) const {
  if (id_ == 0 || now - started_ >= kAskWindow || answers_.count(node_id)) {
    return 0;
  }
  if (reason != nullptr) *reason = reason_;
  return id_;
}

StatusOr<v1::StacksResponse> StackBoard::Get(
    uint64_t id, const std::vector<BoardNode>& running) const {
  if (id == 0 || id != id_) {
    return NotFoundError("stack dump " + std::to_string(id) +
                         " is not the job's latest (" + std::to_string(id_) +
                         ")");
  }
  v1::StacksResponse resp;
  resp.set_request_id(id_);
  resp.set_reason(reason_);
  std::vector<const v1::RankStack*> ranks;
  for (const auto& [node, answer] : answers_) {
    for (const v1::RankStack& r : answer) ranks.push_back(&r);
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const v1::RankStack* a, const v1::RankStack* b) {
              return a->rank() < b->rank();
            });
  for (const v1::RankStack* r : ranks) *resp.add_ranks() = *r;
  for (const BoardNode& n : running) {
    if (answers_.count(n.node_id) == 0) {
      resp.add_missing_nodes(n.node_id + " (" + n.addr + ")");
    }
  }
  resp.set_complete(resp.missing_nodes_size() == 0);
  return resp;
}

}  // namespace ddprun::rendezvous
