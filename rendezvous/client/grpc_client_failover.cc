#include <algorithm>

#include "common/logging.h"
#include "common/net.h"
#include "rendezvous/client/grpc_rendezvous_client_impl.h"

// GrpcRendezvousClient's cross-host failover: when the server an agent
// hosted is gone and nobody on its host took its port over, the successor
// it named hosts a fresh server at its standby endpoint and every client
// moves there.
namespace ddprun::rendezvous::internal {

bool GrpcRendezvousClient::TryFailOver(Clock::Duration unreachable) {
  // An agent on the hosting agent's own host takes the endpoint over at its
  // first failed heartbeat (TryTakeOver); the successor waits longer, so
  // that such a takeover wins and the job keeps one server.
  const Clock::Duration wait = std::max<Clock::Duration>(
      2 * options_.rendezvous.heartbeat_interval, std::chrono::seconds(1));
  std::string successor;
  std::string from;
  bool self = false;
  {
    MutexLock lock(&mu_);
    if (!failover_ || stop_ || successor_endpoint_.empty() ||
        successor_endpoint_ == target_ || unreachable < wait) {
      return false;
    }
    successor = successor_endpoint_;
    from = target_;
    self = successor_node_ == node_.node_id();
  }
  // Only a server that is gone from a host that is up: a host that does
  // not answer may be cut off from this one rather than down, and would
  // then go on with a server of its own (two jobs).
  if (!OldHostRefuses(from)) return false;
  // The heartbeats that failed did not wait for a connection: while this
  // channel was backing off, an agent on the old server's host may have
  // taken its port over. One call that waits for it says.
  if (OldServerBack() || Stopped()) return false;
  if (self) {
    if (options_.host_standby && options_.host_standby()) {
      DDP_LOG(WARNING) << "rendezvous " << from
                       << " stopped answering: this agent, its successor, "
                          "hosts it at "
                       << successor
                       << " now (the job is rebuilt from the agents)";
    } else {
      DDP_LOG(WARNING) << "rendezvous " << from
                       << " stopped answering and this agent, its "
                          "successor, could not host it at "
                       << successor << "; trying there anyway";
    }
  } else {
    DDP_LOG(WARNING) << "rendezvous " << from
                     << " stopped answering: moving to its successor at "
                     << successor;
  }
  SwitchTo(successor);
  return true;
}

bool GrpcRendezvousClient::OldHostRefuses(const std::string& endpoint) {
  StatusOr<Endpoint> ep = ParseEndpoint(endpoint);
  if (ep.ok() && ConnectRefused(ep->host, ep->port, std::chrono::seconds(1))) {
    return true;
  }
  MutexLock lock(&mu_);
  if (!partition_warned_) {
    partition_warned_ = true;
    DDP_LOG(WARNING) << "rendezvous " << endpoint
                     << " does not answer and its host does not refuse "
                        "connections either (down, or cut off from this "
                        "one): not failing over to its successor; waiting "
                        "for it as for a restarting server";
  }
  return false;
}

bool GrpcRendezvousClient::OldServerBack() {
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  {
    MutexLock lock(&mu_);
    if (stop_) return false;
    req = HeartbeatRequestLocked();
    beat_ = &ctx;  // StopHeartbeats cancels it
  }
  PrepareContext(&ctx);
  ctx.set_wait_for_ready(true);
  // gRPC's reconnect backoff is at most 1 s (MakeChannel).
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::HeartbeatResponse resp;
  const grpc::Status s = Stub()->Heartbeat(&ctx, req, &resp);
  MutexLock lock(&mu_);
  beat_ = nullptr;
  // Any answer from a server, even a refusal, means it is there; its news
  // (if any) comes again with the next heartbeat.
  const grpc::StatusCode code = s.error_code();
  return code != grpc::StatusCode::UNAVAILABLE &&
         code != grpc::StatusCode::DEADLINE_EXCEEDED &&
         code != grpc::StatusCode::CANCELLED;
}

void GrpcRendezvousClient::SwitchTo(const std::string& endpoint) {
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel(endpoint, options_.rendezvous);
  auto stub =
      std::shared_ptr<v1::Rendezvous::Stub>(v1::Rendezvous::NewStub(channel));
  MutexLock lock(&mu_);
  target_ = endpoint;
  channel_ = std::move(channel);
  stub_ = std::move(stub);
  ++generation_;
  // The successor names its own successor in its replies.
  successor_endpoint_.clear();
  successor_node_.clear();
  // Calls waiting for the old server (wait_for_ready) would wait until
  // their deadline: they end now and OnAttempt starts them over (a call
  // whose context is cancelled before it starts is cancelled as it starts).
  for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
}

}  // namespace ddprun::rendezvous::internal
