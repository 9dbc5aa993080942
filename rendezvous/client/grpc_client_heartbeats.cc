#include <algorithm>

#include "common/logging.h"
#include "rendezvous/client/grpc_rendezvous_client_impl.h"

// GrpcRendezvousClient's heartbeat thread: liveness, news for the agent,
// re-registration with a server that lost its state, failover, and the
// exit barrier's bound on an unreachable server.
namespace ddprun::rendezvous::internal {

void GrpcRendezvousClient::StartHeartbeats() {
  if (heartbeat_.joinable() || Stopped()) return;
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

void GrpcRendezvousClient::StopHeartbeats() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    if (beat_ != nullptr) beat_->TryCancel();
  }
  cv_.NotifyAll();
}

void GrpcRendezvousClient::Emit(RendezvousEventType type,
                                const std::string& reason) {
  {
    MutexLock lock(&mu_);
    if (!running_ || event_sent_) return;
    event_sent_ = true;
  }
  PostToLoop([this, event = RendezvousEvent{type, reason}] {
    if (handler_) handler_(event);
  });
}

v1::HeartbeatRequest GrpcRendezvousClient::HeartbeatRequestLocked() const {
  v1::HeartbeatRequest req;
  req.set_rdzv_id(rdzv_id_);
  *req.mutable_config() = config_;
  *req.mutable_node() = node_;
  if (registered_) *req.mutable_current() = last_;
  for (const RankStepRate& r : rates_) {
    v1::RankRate* rate = req.add_rank_rates();
    rate->set_rank(r.rank);
    rate->set_steps(r.steps);
    rate->set_steps_per_s(r.per_s);
  }
  return req;
}

bool GrpcRendezvousClient::TryTakeOver() {
  {
    MutexLock lock(&mu_);
    if (!failover_ || stop_) return false;
  }
  return options_.take_over && options_.take_over();
}

void GrpcRendezvousClient::WatchBarrierLocked(Clock::Duration unreachable) {
  if (!in_barrier_ || barrier_lost_) return;
  const RendezvousOptions& o = options_.rendezvous;
  if (unreachable > o.connection_lost_timeout) {
    barrier_lost_ = true;
    if (barrier_ != nullptr) barrier_->TryCancel();
    return;
  }
  if (unreachable >= std::chrono::seconds(5) &&
      unreachable < std::chrono::seconds(5) + o.heartbeat_interval) {
    DDP_LOG(WARNING) << "exit barrier: rendezvous server " << target_
                     << " not reachable for 5 s; this node's workers "
                        "succeeded, waiting up to "
                     << std::chrono::duration_cast<std::chrono::seconds>(
                            o.connection_lost_timeout)
                            .count()
                     << " s for it to come back";
  }
}

void GrpcRendezvousClient::HeartbeatLoop() {
  const RendezvousOptions& o = options_.rendezvous;
  Clock::TimePoint last_ok = clock_->Now();
  bool warned = false;
  bool took_over = false;  // re-register with the new server at once
  while (true) {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    {
      MutexLock lock(&mu_);
      if (!took_over) {
        // Woken early by Stop (and by unrelated notifications: re-check).
        const auto until =
            std::chrono::steady_clock::now() + o.heartbeat_interval;
        while (!stop_ && !beat_now_ &&
               std::chrono::steady_clock::now() < until) {
          (void)cv_.WaitUntil(&mu_, until);
        }
      }
      beat_now_ = false;
      if (stop_) break;
      if (paused_) continue;
      req = HeartbeatRequestLocked();
      beat_ = &ctx;
    }
    PrepareContext(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::max<std::chrono::milliseconds>(
                         o.heartbeat_interval, std::chrono::seconds(1)));
    // Right after a takeover the channel is still reconnecting.
    ctx.set_wait_for_ready(took_over);
    took_over = false;
    v1::HeartbeatResponse resp;
    grpc::Status s = Stub()->Heartbeat(&ctx, req, &resp);
    {
      MutexLock lock(&mu_);
      beat_ = nullptr;
      if (stop_) break;
    }
    if (s.ok()) {
      last_ok = clock_->Now();
      warned = false;
      {
        MutexLock lock(&mu_);
        failover_ = resp.failover();
        successor_endpoint_ = resp.successor_endpoint();
        successor_node_ = resp.successor_node_id();
        job_median_ = resp.median_steps_per_s();
      }
      OnStacksRequest(resp);
      using A = v1::HeartbeatResponse;
      switch (resp.action()) {
        case A::ACTION_REJOIN:
          Emit(RendezvousEventType::kMembershipChanged, resp.reason());
          break;
        case A::ACTION_RESTART:
          Emit(RendezvousEventType::kRestartRequested, resp.reason());
          break;
        case A::ACTION_JOB_FAILED:
          Emit(RendezvousEventType::kJobFailed, resp.reason());
          break;
        default:
          break;
      }
    } else if (Retryable(s) ||
               s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
               // A server shutting down with the beat in flight (our own
               // Stop broke out of the loop above): gone, not a refusal.
               s.error_code() == grpc::StatusCode::CANCELLED) {
      const Clock::Duration unreachable = clock_->Now() - last_ok;
      took_over = TryTakeOver() || TryFailOver(unreachable);
      if (!took_over && unreachable > o.connection_lost_timeout) {
        Emit(
            RendezvousEventType::kConnectionLost,
            "rendezvous " + Target() + " unreachable for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                   unreachable)
                                   .count()) +
                " s: " + s.error_message());
      }
      MutexLock lock(&mu_);
      if (!took_over) WatchBarrierLocked(unreachable);
    } else if (!warned) {
      // A refused heartbeat (token, config, identity) will not fix itself.
      warned = true;
      DDP_LOG(ERROR) << FromGrpc(s, Target()).message();
      Emit(RendezvousEventType::kJobFailed, FromGrpc(s, Target()).message());
    }
  }
}

}  // namespace ddprun::rendezvous::internal
