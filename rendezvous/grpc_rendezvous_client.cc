#include "rendezvous/grpc_rendezvous_client.h"

#include "common/logging.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/grpc_rendezvous_client_impl.h"
#include "rendezvous/local_address.h"

namespace ddprun::rendezvous::internal {
namespace {

// How long a Join call outlives its caller's deadline, waiting for the
// server's own join_timeout verdict (see Join).
constexpr std::chrono::seconds kServerVerdictGrace(3);

}  // namespace

void GrpcRendezvousClient::PrepareContext(grpc::ClientContext* ctx) const {
  if (!options_.token.empty()) {
    ctx->AddMetadata("x-ddprun-token", options_.token);
  }
}

template <typename Call>
grpc::Status GrpcRendezvousClient::CallWithRetry(Clock::TimePoint deadline,
                                                 Call&& call) {
  auto backoff = std::chrono::milliseconds(100);
  while (true) {
    grpc::Status s = call();
    if (!Retryable(s) || SteadyClock::now() >= deadline) {
      return s;
    }
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && TryTakeOver()) {
      Reregister();
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) return s;
    cv_.wait_until(lock, std::min(deadline, SteadyClock::now() + backoff),
                   [this] { return stop_; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

template <typename Call>
grpc::Status GrpcRendezvousClient::CallOnJob(Clock::TimePoint deadline,
                                             Call&& call) {
  grpc::Status s = CallWithRetry(deadline, call);
  if (!LostJob(s)) return s;
  // A new server (restarted, or hosted by another agent after a failover)
  // learns the round first, then the report about it.
  Reregister();
  return CallWithRetry(deadline, call);
}

void GrpcRendezvousClient::WarnIfUnreachable(Clock::TimePoint deadline) {
  const Clock::TimePoint probe_until =
      std::min(deadline, SteadyClock::now() + std::chrono::seconds(5));
  if (channel_->WaitForConnected(ToSystem(probe_until))) return;
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(
      deadline - SteadyClock::now());
  if (left.count() <= 0) return;
  DDP_LOG(WARNING) << "rendezvous server " << options_.endpoint
                   << " not reachable for 5 s; still trying for "
                   << left.count()
                   << " s (check --rdzv_endpoint, that the server runs, and "
                      "firewalls)";
}

StatusOr<agent::RendezvousResult> GrpcRendezvousClient::Join(
    const agent::JoinRequest& request, Clock::TimePoint deadline) {
  v1::JoinRequest req;
  req.set_rdzv_id(request.run_id);
  v1::JobConfig* c = req.mutable_config();
  c->set_min_nodes(request.min_nodes);
  c->set_max_nodes(request.max_nodes);
  c->set_max_restarts(request.max_restarts);
  c->set_join_timeout_ms(options_.join_timeout.count());
  c->set_last_call_timeout_ms(options_.last_call_timeout.count());
  c->set_heartbeat_timeout_ms(options_.heartbeat_timeout.count());
  c->set_bad_host_failures(options_.bad_host_failures);
  c->set_bad_host_window_ms(options_.bad_host_window.count());
  c->set_bad_host_cooldown_ms(options_.bad_host_cooldown.count());
  v1::NodeInfo* n = req.mutable_node();
  n->set_node_id(request.node_id);
  n->set_instance(instance_);
  n->set_role(request.role);
  n->set_local_world_size(request.local_world_size);
  n->set_node_rank_hint(request.node_rank_hint);
  std::string addr = request.local_addr;
  if (addr.empty()) addr = RouteSourceIp(options_.endpoint);
  if (addr.empty()) addr = "127.0.0.1";
  n->set_addr(addr);
  DDP_ASSIGN_OR_RETURN(int port, FreePort(addr));
  n->set_master_port(port);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return CancelledError("rendezvous client left the job");
    *req.mutable_previous() = last_;
    rdzv_id_ = req.rdzv_id();
    config_ = req.config();
    node_ = req.node();
    registered_ = false;
    running_ = false;
    paused_ = false;
  }
  StartHeartbeats();
  WarnIfUnreachable(deadline);

  // The server fails a job that misses min_nodes at join_timeout (measured
  // from when it opened the round) and says why; the call waits a little
  // longer than `deadline`, so that this verdict, not a local timeout racing
  // it, is what every agent reports.
  const Clock::TimePoint call_deadline = deadline + kServerVerdictGrace;
  v1::JoinResponse resp;
  grpc::Status s = CallWithRetry(call_deadline, [&] {
    grpc::ClientContext ctx;
    PrepareContext(&ctx);
    ctx.set_deadline(ToSystem(call_deadline));
    ctx.set_wait_for_ready(true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return grpc::Status(grpc::StatusCode::CANCELLED, "left");
      active_ = &ctx;
    }
    grpc::Status st = stub_->Join(&ctx, req, &resp);
    std::lock_guard<std::mutex> lock(mu_);
    active_ = nullptr;
    return st;
  });
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      SteadyClock::now() >= call_deadline) {
    return DeadlineExceededError("rendezvous " + options_.endpoint +
                                 ": round did not complete before the "
                                 "deadline (" +
                                 s.error_message() + ")");
  }
  if (!s.ok()) {
    // Refused or failed: nothing to keep alive until the next Join (and no
    // second copy of the same error from the heartbeat thread).
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    return FromGrpc(s, options_.endpoint);
  }

  if (resp.job_succeeded()) {
    // A spare: the job ended well without it. Nothing left to heartbeat.
    StopHeartbeats();
    agent::RendezvousResult done;
    done.job_succeeded = true;
    return done;
  }
  const v1::Assignment& a = resp.assignment();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = a;
    registered_ = true;
    running_ = true;
    event_sent_ = false;
  }
  agent::RendezvousResult r;
  r.round = a.round();
  r.group_rank = a.group_rank();
  r.group_world_size = a.group_world_size();
  r.rank_offset = a.rank_offset();
  r.world_size = a.world_size();
  r.role_rank_offset = a.role_rank_offset();
  r.role_world_size = a.role_world_size();
  r.master_addr = a.master_addr();
  r.master_port = a.master_port();
  r.restart_count = a.restart_count();
  return r;
}

StatusOr<bool> GrpcRendezvousClient::ReportFailure(int64_t round,
                                                   const std::string& reason,
                                                   bool retry) {
  v1::ReportFailureRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
    running_ = false;  // the agent restarts or stops on its own now
  }
  req.set_instance(instance_);
  req.set_round(round);
  req.set_reason(reason.substr(0, 4096));
  req.set_no_retry(!retry);
  const Clock::TimePoint deadline = SteadyClock::now() + options_.rpc_timeout;
  v1::ReportFailureResponse resp;
  grpc::Status s = CallOnJob(deadline, [&] {
    grpc::ClientContext ctx;
    PrepareContext(&ctx);
    ctx.set_deadline(ToSystem(deadline));
    ctx.set_wait_for_ready(true);
    return stub_->ReportFailure(&ctx, req, &resp);
  });
  if (!s.ok()) return FromGrpc(s, options_.endpoint);
  return resp.will_restart();
}

Status GrpcRendezvousClient::ReportSuccess(int64_t round,
                                           Clock::Duration barrier_timeout) {
  v1::ReportSuccessRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
    running_ = false;
    in_barrier_ = true;
    barrier_lost_ = false;
  }
  req.set_instance(instance_);
  req.set_round(round);
  const Clock::TimePoint deadline = SteadyClock::now() + barrier_timeout;
  v1::ReportSuccessResponse resp;
  grpc::Status s = CallOnJob(deadline, [&] {
    grpc::ClientContext ctx;
    PrepareContext(&ctx);
    ctx.set_deadline(ToSystem(deadline));
    ctx.set_wait_for_ready(true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (barrier_lost_) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "server lost");
      }
      active_ = &ctx;
    }
    grpc::Status st = stub_->ReportSuccess(&ctx, req, &resp);
    std::lock_guard<std::mutex> lock(mu_);
    active_ = nullptr;
    return st;
  });
  bool lost = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_barrier_ = false;
    lost = barrier_lost_;
  }
  if (s.ok()) {
    StopHeartbeats();
    return Status::Ok();
  }
  if (lost) {
    return UnavailableError(
        "exit barrier: rendezvous server " + options_.endpoint +
        " unreachable for " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                           options_.connection_lost_timeout)
                           .count()) +
        " s (rdzv_conf connection_lost_timeout); gave up waiting for the "
        "other nodes (this node's workers succeeded)");
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return DeadlineExceededError(
        "exit barrier: not every node finished within " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(barrier_timeout)
                .count()) +
        " s");
  }
  return FromGrpc(s, options_.endpoint);
}

void GrpcRendezvousClient::Leave() {
  v1::LeaveRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ != nullptr) active_->TryCancel();
    if (rdzv_id_.empty()) {
      stop_ = true;
      cv_.notify_all();
      return;
    }
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
  }
  StopHeartbeats();
  req.set_instance(instance_);
  req.set_reason("agent stopping");
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::min<std::chrono::milliseconds>(
                       options_.rpc_timeout, std::chrono::seconds(2)));
  v1::LeaveResponse resp;
  grpc::Status s = stub_->Leave(&ctx, req, &resp);
  if (!s.ok()) {
    DDP_LOG(WARNING) << "rendezvous leave: "
                     << FromGrpc(s, options_.endpoint).message();
  }
}

}  // namespace ddprun::rendezvous::internal

namespace ddprun::rendezvous {

StatusOr<std::unique_ptr<agent::RendezvousClient>> CreateGrpcRendezvousClient(
    const GrpcClientOptions& options) {
  StatusOr<Endpoint> endpoint = ParseEndpoint(options.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  // A restarted server must be found again within about a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Cluster-internal traffic: an http_proxy/https_proxy set for the outside
  // world (common on clusters) must not capture the rendezvous connection.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  auto channel = grpc::CreateCustomChannel(endpoint->ToString(), creds, args);
  return std::unique_ptr<agent::RendezvousClient>(
      new internal::GrpcRendezvousClient(options, std::move(channel)));
}

}  // namespace ddprun::rendezvous
