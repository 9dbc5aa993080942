#include <algorithm>

#include "common/logging.h"
#include "rendezvous/client/grpc_rendezvous_client_impl.h"

// GrpcRendezvousClient's call machinery: retries with backoff on the loop's
// timers, failover and re-registration between attempts. Every function
// here runs on the loop thread.
namespace ddprun::rendezvous::internal {

void GrpcRendezvousClient::PostToLoop(std::function<void()> fn) {
  std::weak_ptr<char> alive = alive_;
  loop_->Post([alive, fn = std::move(fn)] {
    if (!alive.expired()) fn();
  });
}

void GrpcRendezvousClient::PrepareContext(grpc::ClientContext* ctx) const {
  if (!options_.rendezvous.token.empty()) {
    ctx->AddMetadata("x-ddprun-token", options_.rendezvous.token);
  }
}

std::chrono::system_clock::time_point GrpcRendezvousClient::ToSystem(
    Clock::TimePoint deadline) const {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             deadline - clock_->Now());
}

void GrpcRendezvousClient::Run(std::shared_ptr<Retry> retry) {
  if (Stopped()) {
    Complete(retry, grpc::Status(grpc::StatusCode::CANCELLED, "left"));
    return;
  }
  retry->generation = Generation();
  retry->attempt([this, retry](grpc::Status s) { OnAttempt(retry, s); });
}

void GrpcRendezvousClient::OnAttempt(const std::shared_ptr<Retry>& retry,
                                     const grpc::Status& s) {
  if (retries_.count(retry) == 0) return;  // answered already (Leave)
  if (s.error_code() == grpc::StatusCode::CANCELLED && !Stopped() &&
      retry->generation != Generation()) {
    // Cancelled by a move to a successor endpoint: the new server learns
    // the round, then the call starts over there.
    retry->backoff = std::chrono::milliseconds(100);
    Reregister([this, retry] { Run(retry); });
    return;
  }
  if (retry->on_job && !retry->reregistered && LostJob(s)) {
    // A new server (restarted, or hosted by another agent after a
    // failover) learns the round first, then the report about it.
    retry->reregistered = true;
    retry->backoff = std::chrono::milliseconds(100);
    Reregister([this, retry] { Run(retry); });
    return;
  }
  if (!Retryable(s) || clock_->Now() >= retry->deadline) {
    Complete(retry, s);
    return;
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE && TryTakeOver()) {
    Reregister([this, retry] { Run(retry); });
    return;
  }
  if (Stopped()) {
    Complete(retry, s);
    return;
  }
  const Clock::TimePoint next =
      std::min(retry->deadline, clock_->Now() + retry->backoff);
  retry->backoff =
      std::min(retry->backoff * 2, std::chrono::milliseconds(2000));
  std::weak_ptr<char> alive = alive_;
  retry->timer = loop_->RunAt(next, [this, alive, retry] {
    if (alive.expired()) return;
    retry->timer = 0;
    Run(retry);
  });
}

void GrpcRendezvousClient::Complete(const std::shared_ptr<Retry>& retry,
                                    const grpc::Status& s) {
  if (retries_.erase(retry) == 0) return;
  if (retry->timer != 0) {
    loop_->Cancel(retry->timer);
    retry->timer = 0;
  }
  retry->done(s);
}

void GrpcRendezvousClient::Reregister(std::function<void()> then) {
  auto rpc =
      std::make_shared<Rpc<v1::HeartbeatRequest, v1::HeartbeatResponse>>();
  {
    MutexLock lock(&mu_);
    rpc->req = HeartbeatRequestLocked();
  }
  PrepareContext(&rpc->ctx);
  // The channel may still be reconnecting to the new server.
  rpc->ctx.set_wait_for_ready(true);
  rpc->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
  StartCall(
      rpc,
      [this](auto* ctx, auto* req, auto* resp, auto cb) {
        Stub()->async()->Heartbeat(ctx, req, resp, std::move(cb));
      },
      [this, then = std::move(then)](grpc::Status s) {
        if (!s.ok()) {
          DDP_LOG(WARNING) << "re-registering with the rendezvous: "
                           << FromGrpc(s, Target()).message();
        }
        then();
      });
}

}  // namespace ddprun::rendezvous::internal
