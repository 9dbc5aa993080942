#include <chrono>

#include "common/logging.h"
#include "rendezvous/rendezvous_job.h"

// RendezvousJob's worker-failure rules: the restart budget's decision
// (restart_budget.h), the node-loss refund, the bad-host charge, and
// failures that are not retried.
namespace ddprun::rendezvous {
namespace {

using Action = v1::HeartbeatResponse;

}  // namespace

void RendezvousJob::AnswerFailure(WaiterId waiter, bool will_restart,
                                  std::vector<Outcome>* out) {
  Outcome o;
  o.waiter = waiter;
  o.failure.set_will_restart(will_restart);
  o.failure.set_restart_count(budget_.used());
  out->push_back(std::move(o));
}

Status RendezvousJob::ReportFailure(const v1::ReportFailureRequest& req,
                                    WaiterId waiter,
                                    std::vector<Outcome>* out) {
  Status reported = ReportNodeFailure(req, waiter, out);
  if (reported.ok()) MarkHeard(req.node_id(), req.instance());
  return reported;
}

Status RendezvousJob::ReportNodeFailure(const v1::ReportFailureRequest& req,
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
    RestartBudget::Pending* pending = budget_.pending();
    if (pending != nullptr && pending->round == req.round() &&
        !pending->charged) {
      pending->waiters.push_back(waiter);
      pending->waiting_nodes.push_back(req.node_id());
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
  const Clock::TimePoint now = clock_->Now();
  RestartBudget::Pending& pending = budget_.Open(
      round_, what, now + heartbeat_timeout_ + std::chrono::milliseconds(500));
  if (const Node* reporter = FindNode(req.node_id(), req.instance())) {
    pending.host = reporter->info.addr();
    pending.reported_at = now;
    if (bad_hosts_.RecordFailure(pending.host, now)) deadline_moved_ = true;
  }
  if (pending.charged) {
    AnswerFailure(waiter, true, out);
  } else {
    pending.waiters.push_back(waiter);
    pending.waiting_nodes.push_back(req.node_id());
  }
  // Only the reporter ran this round: no node loss can turn up to explain
  // the failure, so an exhausted budget is final now, not after the wait.
  const bool decide_now = !pending.charged && RunningCount() <= 1;
  deadline_moved_ = true;
  Invalidate(Action::ACTION_RESTART, what, out);
  if (decide_now) Fail(budget_.Exhausted(what), out);
  return Status::Ok();
}

void RendezvousJob::OnNodeLost(int64_t round, const std::string& who,
                               std::vector<Outcome>* out) {
  std::optional<RestartBudget::Pending> settled = budget_.Refund(round);
  if (!settled) return;
  DDP_LOG(INFO) << "rendezvous '" << id_ << "': the worker failure in round "
                << round << " follows the loss of " << who
                << ": no restart budget spent";
  if (!settled->host.empty() &&
      bad_hosts_.ForgetFailure(settled->host, settled->reported_at)) {
    deadline_moved_ = true;  // its nodes are let in at the next Tick
  }
  for (WaiterId w : settled->waiters) AnswerFailure(w, true, out);
  last_action_ = Action::ACTION_REJOIN;
}

}  // namespace ddprun::rendezvous
