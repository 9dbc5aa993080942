#include <algorithm>

#include "common/logging.h"
#include "rendezvous/grpc_rendezvous_client_impl.h"

// GrpcRendezvousClient's heartbeat thread: liveness, news for the agent,
// re-registration with a server that lost its state, failover, and the
// exit barrier's bound on an unreachable server.
namespace ddprun::rendezvous::internal {

void GrpcRendezvousClient::StartHeartbeats() {
  std::lock_guard<std::mutex> lock(mu_);
  if (heartbeat_.joinable() || stop_) return;
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

void GrpcRendezvousClient::StopHeartbeats() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  cv_.notify_all();
  if (heartbeat_.joinable() &&
      heartbeat_.get_id() != std::this_thread::get_id()) {
    heartbeat_.join();
  }
}

void GrpcRendezvousClient::Emit(RendezvousEventType type,
                                const std::string& reason) {
  EventHandler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_ || event_sent_) return;
    event_sent_ = true;
    handler = handler_;
  }
  if (handler) handler(RendezvousEvent{type, reason});
}

v1::HeartbeatRequest GrpcRendezvousClient::HeartbeatRequestLocked() const {
  v1::HeartbeatRequest req;
  req.set_rdzv_id(rdzv_id_);
  *req.mutable_config() = config_;
  *req.mutable_node() = node_;
  if (registered_) *req.mutable_current() = last_;
  return req;
}

bool GrpcRendezvousClient::TryTakeOver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failover_ || stop_) return false;
  }
  return options_.take_over && options_.take_over();
}

void GrpcRendezvousClient::Reregister() {
  v1::HeartbeatRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    req = HeartbeatRequestLocked();
  }
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  // The channel may still be reconnecting to the new server.
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::HeartbeatResponse resp;
  grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
  if (!s.ok()) {
    DDP_LOG(WARNING) << "re-registering with the rendezvous: "
                     << FromGrpc(s, options_.endpoint).message();
  }
}

void GrpcRendezvousClient::WatchBarrierLocked(
    SteadyClock::duration unreachable) {
  if (!in_barrier_ || barrier_lost_) return;
  if (unreachable > options_.connection_lost_timeout) {
    barrier_lost_ = true;
    if (active_ != nullptr) active_->TryCancel();
    return;
  }
  if (unreachable >= std::chrono::seconds(5) &&
      unreachable < std::chrono::seconds(5) + options_.heartbeat_interval) {
    DDP_LOG(WARNING) << "exit barrier: rendezvous server " << options_.endpoint
                     << " not reachable for 5 s; this node's workers "
                        "succeeded, waiting up to "
                     << std::chrono::duration_cast<std::chrono::seconds>(
                            options_.connection_lost_timeout)
                            .count()
                     << " s for it to come back";
  }
}

void GrpcRendezvousClient::HeartbeatLoop() {
  SteadyClock::time_point last_ok = SteadyClock::now();
  bool warned = false;
  bool took_over = false;  // re-register with the new server at once
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!took_over) {
      cv_.wait_for(lock, options_.heartbeat_interval, [this] { return stop_; });
    }
    if (stop_) break;
    if (paused_) continue;
    v1::HeartbeatRequest req = HeartbeatRequestLocked();
    lock.unlock();

    grpc::ClientContext ctx;
    PrepareContext(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::max<std::chrono::milliseconds>(
                         options_.heartbeat_interval, std::chrono::seconds(1)));
    // Right after a takeover the channel is still reconnecting.
    ctx.set_wait_for_ready(took_over);
    took_over = false;
    v1::HeartbeatResponse resp;
    grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (s.ok()) {
      last_ok = SteadyClock::now();
      warned = false;
      {
        std::lock_guard<std::mutex> guard(mu_);
        failover_ = resp.failover();
      }
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
               s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      took_over = TryTakeOver();
      const auto unreachable = SteadyClock::now() - last_ok;
      if (!took_over && unreachable > options_.connection_lost_timeout) {
        Emit(
            RendezvousEventType::kConnectionLost,
            "rendezvous " + options_.endpoint + " unreachable for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                   unreachable)
                                   .count()) +
                " s: " + s.error_message());
      }
      std::lock_guard<std::mutex> guard(mu_);
      if (!took_over) WatchBarrierLocked(unreachable);
    } else if (!warned) {
      // A refused heartbeat (token, config, identity) will not fix itself.
      warned = true;
      DDP_LOG(ERROR) << FromGrpc(s, options_.endpoint).message();
      Emit(RendezvousEventType::kJobFailed,
           FromGrpc(s, options_.endpoint).message());
    }
    lock.lock();
  }
}

}  // namespace ddprun::rendezvous::internal
