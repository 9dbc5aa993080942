#include "agent/elastic/rank_replacement.h"

#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/logging.h"

namespace ddprun::agent {
namespace {

constexpr std::chrono::milliseconds kHealPoll{50};
// How often the generation's number is looked for before the replacement
// starts (a store of another node shows it a round trip later).
constexpr std::chrono::milliseconds kPublishPoll{5};

std::string RecordKey(int64_t generation) {
  return std::string(kGenerationKey) + "/" + std::to_string(generation);
}

}  // namespace

RankReplacement::RankReplacement(Options options, EventLoop* loop,
                                 rendezvous::RendezvousClient* rendezvous,
                                 WorkerStore* store, Console* console,
                                 Agent* agent)
    : options_(std::move(options)),
      loop_(loop),
      rendezvous_(rendezvous),
      store_(store),
      console_(console),
      agent_(agent) {}

RankReplacement::~RankReplacement() { Stop(); }

void RankReplacement::StartGroup(const rendezvous::RendezvousResult& round,
                                 bool reaches_store) {
  Stop();
  round_ = round;
  reaches_store_ = reaches_store;
  generation_ = 0;
  replaced_.clear();
  healed_at_steps_.clear();
}

void RankReplacement::Stop() {
  ++epoch_;
  busy_local_rank_ = -1;
  whole_node_ = false;
  busy_rank_ = -1;
  started_ = false;
  if (poll_armed_) {
    loop_->Cancel(poll_timer_);
    poll_armed_ = false;
  }
}

bool RankReplacement::Replace(int local_rank, int rank,
                              const std::string& reason) {
  if (store_ == nullptr) return false;
  if (!reaches_store_) {
    DDP_LOG(WARNING) << "rank " << rank
                     << " failed on a node that cannot write the workers' "
                        "store: restarting the group";
    return false;
  }
  if (round_.world_size < 2) return false;  // no live peer to heal from
  if (busy()) {
    DDP_LOG(WARNING) << "rank " << rank << " failed while " << Ranks()
                     << " heal(s) (generation " << generation_
                     << "): restarting the group";
    return false;
  }
  auto healed_at = healed_at_steps_.find(local_rank);
  if (healed_at != healed_at_steps_.end() &&
      agent_->StepsOf(local_rank) <= healed_at->second) {
    DDP_LOG(WARNING) << "rank " << rank
                     << " failed again before making a step after it "
                        "healed: restarting the group";
    return false;
  }
  busy_local_rank_ = local_rank;
  busy_rank_ = rank;
  started_ = false;
  heal_started_ = loop_->clock()->Now();
  const uint64_t epoch = epoch_;
  rendezvous_->ReplaceRank(
      round_.round, rank, generation_ + 1, reason,
      [this, epoch, local_rank, rank](
          StatusOr<rendezvous::RendezvousClient::ReplaceAnswer> answer) {
        OnRendezvousAnswer(epoch, local_rank, rank, std::move(answer));
      });
  replaced_.push_back({rank, generation_ + 1, reason, -1});
  return true;
}

bool RankReplacement::TakeOver(int64_t generation, int local_world_size) {
  if (store_ == nullptr || !reaches_store_ || local_world_size < 1) {
    return false;
  }
  whole_node_ = true;
  whole_node_ranks_ = local_world_size;
  busy_rank_ = round_.rank_offset;
  started_ = false;
  heal_started_ = loop_->clock()->Now();
  heal_deadline_ = heal_started_ + options_.heal_timeout;
  generation_ = generation;
  // The server never hands group rank 0's place over: rank 0 lives.
  source_ = 0;
  std::vector<int> ranks;
  const std::string reason = "a lost node's place";
  for (int i = 0; i < local_world_size; ++i) {
    ranks.push_back(round_.rank_offset + i);
    replaced_.push_back({round_.rank_offset + i, generation, reason, -1});
  }
  store_->Set(RecordKey(generation_), Record(ranks, reason));
  store_->Set(kGenerationKey, std::to_string(generation_));
  AwaitPublished(epoch_);
  return true;
}

std::string RankReplacement::Record(const std::vector<int>& ranks,
                                    const std::string& reason) const {
  nlohmann::json record;
  record["replaced"] = ranks;
  record["reason"] = reason;
  record["source"] = source_;
  // A reason is a worker's words: bytes that are not UTF-8 are replaced.
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RankReplacement::OnRendezvousAnswer(
    uint64_t epoch, int local_rank, int rank,
    StatusOr<rendezvous::RendezvousClient::ReplaceAnswer> answer) {
  if (epoch != epoch_) return;  // the group stopped meanwhile
  if (!answer.ok()) {
    GiveUp(local_rank, "the rendezvous cannot replace rank " +
                           std::to_string(rank) + " (" +
                           answer.status().message() + ")");
    return;
  }
  if (!answer->replaced) {
    if (answer->healing_rank >= 0) {
      GiveUp(local_rank, "rank " + std::to_string(rank) +
                             " failed while rank " +
                             std::to_string(answer->healing_rank) +
                             " heals on another node");
      return;
    }
    GiveUp(local_rank, "no restarts left to replace rank " +
                           std::to_string(rank));
    return;
  }
  // The server's number when it hands them out: nodes never share one.
  generation_ = answer->generation > 0 ? answer->generation : generation_ + 1;
  replaced_.back().generation = generation_;
  // The lowest rank that holds state: the failed one is the only rank
  // without it (a second failure while healing restarts the group).
  source_ = rank == 0 ? 1 : 0;
  store_->Set(RecordKey(generation_), Record({rank}, replaced_.back().reason));
  store_->Set(kGenerationKey, std::to_string(generation_));
  heal_deadline_ = loop_->clock()->Now() + options_.heal_timeout;
  AwaitPublished(epoch);
}

void RankReplacement::AwaitPublished(uint64_t epoch) {
  poll_armed_ = false;
  if (epoch != epoch_ || !busy()) return;
  // The replacement reads its generation's record as it starts: it starts
  // once the store shows the number, which is written after the record.
  const Clock::TimePoint now = loop_->clock()->Now();
  if (store_->Get(kGenerationKey) != std::to_string(generation_)) {
    if (now >= heal_deadline_) {
      GiveUp(whole_node_ ? -1 : busy_local_rank_,
             "generation " + std::to_string(generation_) +
                 " did not reach the workers' store within " +
                 std::to_string(options_.heal_timeout.count() / 1000) + " s");
      return;
    }
    poll_timer_ = loop_->RunAt(now + kPublishPoll,
                               [this, epoch] { AwaitPublished(epoch); });
    poll_armed_ = true;
    return;
  }
  started_ = true;
  const int local_rank = whole_node_ ? -1 : busy_local_rank_;
  Status started = agent_->StartReplacement(local_rank, generation_,
                                            replaced_.back().reason);
  if (!started.ok()) {
    GiveUp(local_rank, "cannot start the replacement of " + Ranks() + ": " +
                           started.message());
    return;
  }
  poll_timer_ = loop_->RunAt(now + kHealPoll,
                             [this, epoch] { PollHealed(epoch); });
  poll_armed_ = true;
}

void RankReplacement::PollHealed(uint64_t epoch) {
  poll_armed_ = false;
  if (epoch != epoch_ || !busy()) return;
  const Clock::TimePoint now = loop_->clock()->Now();
  std::optional<std::string> healed =
      store_->Get(RecordKey(generation_) + "/healed");
  if (healed.has_value()) {
    const double seconds =
        std::chrono::duration<double>(now - heal_started_).count();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "[ddprun] %s replaced (generation %lld): healed from "
                  "rank %d in %.2f s\n",
                  Ranks().c_str(), static_cast<long long>(generation_), source_,
                  seconds);
    console_->Write(Console::Stream::kErr, line);
    const int local_rank = whole_node_ ? -1 : busy_local_rank_;
    const int first = whole_node_ ? 0 : busy_local_rank_;
    const int count = whole_node_ ? whole_node_ranks_ : 1;
    for (int i = 0; i < count; ++i) {
      replaced_[replaced_.size() - count + i].heal_seconds = seconds;
      healed_at_steps_[first + i] = agent_->StepsOf(first + i);
    }
    rendezvous_->ReportHealed(round_.round, busy_rank_, generation_, seconds);
    agent_->ReplacementHealed(local_rank, generation_, source_, seconds);
    busy_local_rank_ = -1;
    busy_rank_ = -1;
    whole_node_ = false;
    return;
  }
  if (now >= heal_deadline_) {
    GiveUp(whole_node_ ? -1 : busy_local_rank_,
           Ranks() + " (generation " + std::to_string(generation_) +
               ") did not heal within " +
               std::to_string(options_.heal_timeout.count() / 1000) + " s");
    return;
  }
  poll_timer_ = loop_->RunAt(now + kHealPoll,
                             [this, epoch] { PollHealed(epoch); });
  poll_armed_ = true;
}

std::string RankReplacement::Ranks() const {
  if (!whole_node_) return "rank " + std::to_string(busy_rank_);
  return "ranks " + std::to_string(busy_rank_) + "-" +
         std::to_string(busy_rank_ + whole_node_ranks_ - 1);
}

void RankReplacement::GiveUp(int local_rank, const std::string& why) {
  DDP_LOG(WARNING) << why << ": restarting the group";
  const bool started = started_;
  const int64_t generation = generation_;
  Stop();
  if (started) agent_->ReplacementGaveUp(local_rank, generation, why);
  agent_->RestartGroup(local_rank, why);
}

}  // namespace ddprun::agent
