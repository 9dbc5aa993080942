#include "rendezvous/core/restart_budget.h"

namespace ddprun::rendezvous {

RestartBudget::Pending& RestartBudget::Open(int64_t round, std::string reason,
                                            Clock::TimePoint decide_at) {
  Pending pending;
  pending.round = round;
  pending.decide_at = decide_at;
  pending.reason = std::move(reason);
  pending.charged = used_ < max_;
  if (pending.charged) ++used_;
  pending_ = std::move(pending);
  return *pending_;
}

std::optional<RestartBudget::Pending> RestartBudget::Refund(int64_t round) {
  if (!pending_ || pending_->round != round) return std::nullopt;
  if (pending_->charged) --used_;
  return Take();
}

std::optional<RestartBudget::Pending> RestartBudget::Take() {
  std::optional<Pending> taken = std::move(pending_);
  pending_.reset();
  return taken;
}

std::string RestartBudget::Exhausted(const std::string& failure) const {
  return "restart budget exhausted (max_restarts=" + std::to_string(max_) +
         "); " + failure;
}

}  // namespace ddprun::rendezvous
