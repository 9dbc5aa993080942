#include <chrono>

#include "common/logging.h"
#include "rendezvous/rendezvous_job.h"

// RendezvousJob's worker-failure rules: the job-global restart budget, the
// node-loss refund, and failures that are not retried. Split from
// rendezvous_job.cc to keep files small.
namespace ddprun::rendezvous {
namespace {

using Action = v1::HeartbeatResponse;

}  // namespace

std::string RendezvousJob::BudgetExhausted(const std::string& failure) const {
  return "restart budget exhausted (max_restarts=" +
         std::to_string(config_.max_restarts()) + "); " + failure;
}

void RendezvousJob::AnswerFailure(WaiterId waiter, bool will_restart,
                                  std::vector<Outcome>* out) {
  Outcome o;
  o.waiter = waiter;
  o.failure.set_will_restart(will_restart);
  o.failure.set_restart_count(restart_count_);
  out->push_back(std::move(o));
}

Status RendezvousJob::ReportFailure(const v1::ReportFailureRequest& req,
                                    WaiterId waiter,
                                    std::vector<Outcome>* out) {
  if (phase_ == Phase::kSucceeded) return FailedPreconditionError(Closed());
  if (phase_ == Phase::kFailed) {
    AnswerFailure(waiter, false, out);
    return Status::Ok();
  }
  if (FindNode(req.node_id(), req.instance()) == nullptr &&
      req.round() >= round_) {
    return NotFoundError("node '" + req.node_id() +
                         "' is not part of rendezvous '" + id_ + "'");
  }
  if (req.no_retry()) {
    // A usage error fails the job whatever round it is in: the next attempt
    // would fail the same way. No budget is spent.
    AnswerFailure(waiter, false, out);
    Fail("node '" + req.node_id() + "' reported a failure that is not retried" +
             (req.reason().empty() ? "" : ": " + req.reason()),
         out);
    return Status::Ok();
  }
  if (req.round() < round_) {
    // That round already ended; no second budget unit for it.
    if (pending_failure_ && pending_failure_->round == req.round() &&
        !pending_failure_->charged) {
      pending_failure_->waiters.push_back(waiter);
    } else {
      AnswerFailure(waiter, true, out);
    }
    return Status::Ok();
  }
  if (phase_ != Phase::kRunning || req.round() != round_) {
    return FailedPreconditionError("round " + std::to_string(req.round()) +
                                   " of rendezvous '" + id_ +
                                   "' is not running");
  }
  const std::string what = "node '" + req.node_id() +
                           "' reported a worker failure in round " +
                           std::to_string(round_) +
                           (req.reason().empty() ? "" : ": " + req.reason());
  PendingFailure pending;
  pending.round = round_;
  pending.decide_at =
      clock_->Now() + heartbeat_timeout_ + std::chrono::milliseconds(500);
  pending.reason = what;
  pending.charged = restart_count_ < static_cast<int>(config_.max_restarts());
  if (const Node* reporter = FindNode(req.node_id(), req.instance())) {
    pending.host = reporter->info.addr();
    pending.reported_at = clock_->Now();
    RecordHostFailure(pending.host);
  }
  if (pending.charged) {
    ++restart_count_;
    AnswerFailure(waiter, true, out);
  } else {
    pending.waiters.push_back(waiter);
  }
  // Only the reporter ran this round: no node loss can turn up to explain
  // the failure, so an exhausted budget is final now, not after the wait.
  const bool decide_now = !pending.charged && RunningCount() <= 1;
  pending_failure_ = std::move(pending);
  deadline_moved_ = true;
  Invalidate(Action::ACTION_RESTART, what, out);
  if (decide_now) Fail(BudgetExhausted(what), out);
  return Status::Ok();
}

void RendezvousJob::OnNodeLost(int64_t round, const std::string& who,
                               std::vector<Outcome>* out) {
  if (!pending_failure_ || pending_failure_->round != round) return;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "': the worker failure in round "
                << round << " follows the loss of " << who
                << ": no restart budget spent";
  if (pending_failure_->charged) --restart_count_;
  if (!pending_failure_->host.empty()) {
    ForgetHostFailure(pending_failure_->host, pending_failure_->reported_at);
  }
  for (WaiterId w : pending_failure_->waiters) AnswerFailure(w, true, out);
  pending_failure_.reset();
  last_action_ = Action::ACTION_REJOIN;
}

}  // namespace ddprun::rendezvous
