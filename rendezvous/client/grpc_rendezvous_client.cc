#include "rendezvous/client/grpc_rendezvous_client.h"

#include <random>

#include "common/logging.h"
#include "common/net.h"
#include "rendezvous/client/grpc_rendezvous_client_impl.h"

namespace ddprun::rendezvous::internal {
namespace {

// How long a Join call outlives its caller's deadline, waiting for the
// server's own join_timeout verdict (see Join).
constexpr std::chrono::seconds kServerVerdictGrace(3);

std::string WholeSeconds(Clock::Duration d) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

}  // namespace

GrpcRendezvousClient::GrpcRendezvousClient(
    const GrpcClientOptions& options, Endpoint endpoint, EventLoop* loop,
    std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      endpoint_(std::move(endpoint)),
      loop_(loop),
      clock_(loop->clock()),
      target_(options.endpoint),
      channel_(channel),
      stub_(v1::Rendezvous::NewStub(channel)) {
  std::random_device rd;
  while (instance_ == 0) {
    instance_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
}

GrpcRendezvousClient::~GrpcRendezvousClient() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
    if (beat_ != nullptr) beat_->TryCancel();
  }
  cv_.NotifyAll();
  if (heartbeat_.joinable()) heartbeat_.join();
  {
    MutexLock lock(&mu_);
    while (callbacks_ > 0) cv_.Wait(&mu_);
  }
  for (const auto& retry : retries_) {
    if (retry->timer != 0) loop_->Cancel(retry->timer);
  }
  if (warn_timer_ != 0) loop_->Cancel(warn_timer_);
  alive_.reset();
}

void GrpcRendezvousClient::WarnIfUnreachable(Clock::TimePoint deadline) {
  const Clock::TimePoint probe_at =
      std::min(deadline, clock_->Now() + std::chrono::seconds(5));
  if (warn_timer_ != 0) loop_->Cancel(warn_timer_);
  std::weak_ptr<char> alive = alive_;
  warn_timer_ = loop_->RunAt(probe_at, [this, alive, deadline] {
    if (alive.expired()) return;
    warn_timer_ = 0;
    if (!joining_ ||
        Channel()->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
      return;
    }
    const Clock::Duration left = deadline - clock_->Now();
    if (std::chrono::duration_cast<std::chrono::seconds>(left).count() <= 0) {
      return;
    }
    DDP_LOG(WARNING) << "rendezvous server " << Target()
                     << " not reachable for 5 s; still trying for "
                     << WholeSeconds(left)
                     << " s (check --rdzv_endpoint, that the server runs, and "
                        "firewalls)";
  });
}

void GrpcRendezvousClient::Join(const JoinRequest& request,
                                Clock::TimePoint deadline, JoinDone done) {
  v1::JoinRequest req;
  req.set_rdzv_id(request.run_id);
  v1::JobConfig* c = req.mutable_config();
  const RendezvousOptions& o = options_.rendezvous;
  c->set_min_nodes(request.min_nodes);
  c->set_max_nodes(request.max_nodes);
  c->set_max_restarts(request.max_restarts);
  c->set_join_timeout_ms(o.join_timeout.count());
  c->set_last_call_timeout_ms(o.last_call_timeout.count());
  c->set_heartbeat_timeout_ms(o.heartbeat_timeout.count());
  c->set_bad_host_failures(o.bad_host_failures);
  c->set_bad_host_window_ms(o.bad_host_window.count());
  c->set_bad_host_cooldown_ms(o.bad_host_cooldown.count());
  v1::NodeInfo* n = req.mutable_node();
  n->set_node_id(request.node_id);
  n->set_instance(instance_);
  n->set_role(request.role);
  n->set_local_world_size(request.local_world_size);
  n->set_node_rank_hint(request.node_rank_hint);
  std::string addr = request.local_addr;
  if (addr.empty()) {
    addr = SourceAddressTowards(endpoint_.host, endpoint_.port)
               .value_or("127.0.0.1");
  }
  n->set_addr(addr);
  StatusOr<int> port = options_.master_port > 0
                           ? StatusOr<int>(options_.master_port)
                           : FreePort(addr);
  if (!port.ok()) {
    PostToLoop([done, s = port.status()] { done(s); });
    return;
  }
  n->set_master_port(*port);
  n->set_standby_endpoint(options_.standby_endpoint);
  {
    MutexLock lock(&mu_);
    if (stop_) {
      PostToLoop(
          [done] { done(CancelledError("rendezvous client left the job")); });
      return;
    }
    *req.mutable_previous() = last_;
    rdzv_id_ = req.rdzv_id();
    config_ = req.config();
    node_ = req.node();
    registered_ = false;
    running_ = false;
    paused_ = false;
  }
  StartHeartbeats();
  joining_ = true;
  WarnIfUnreachable(deadline);

  // The server fails a job that misses min_nodes at join_timeout (measured
  // from when it opened the round) and says why; the call waits a little
  // longer than `deadline`, so that this verdict, not a local timeout racing
  // it, is what every agent reports.
  const Clock::TimePoint call_deadline = deadline + kServerVerdictGrace;
  auto retry = std::make_shared<Retry>();
  retry->deadline = call_deadline;
  auto answer = std::make_shared<v1::JoinResponse>();
  retry->attempt = [this, req, answer, call_deadline](Finished finished) {
    StartAttempt(
        req, call_deadline,
        [this](auto* ctx, auto* q, auto* p, auto cb) {
          Stub()->async()->Join(ctx, q, p, std::move(cb));
        },
        answer, std::move(finished));
  };
  retry->done = [this, answer, call_deadline, done](grpc::Status s) {
    joining_ = false;
    if (warn_timer_ != 0) {
      loop_->Cancel(warn_timer_);
      warn_timer_ = 0;
    }
    done(OnJoinAnswer(s, *answer, call_deadline));
  };
  retries_.insert(retry);
  Run(retry);
}

StatusOr<RendezvousResult> GrpcRendezvousClient::OnJoinAnswer(
    const grpc::Status& s, const v1::JoinResponse& resp,
    Clock::TimePoint call_deadline) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      clock_->Now() >= call_deadline) {
    return DeadlineExceededError("rendezvous " + Target() +
                                 ": round did not complete before the "
                                 "deadline (" +
                                 s.error_message() + ")");
  }
  if (!s.ok()) {
    // Refused or failed: nothing to keep alive until the next Join (and no
    // second copy of the same error from the heartbeat thread).
    MutexLock lock(&mu_);
    paused_ = true;
    return FromGrpc(s, target_);
  }
  if (resp.job_succeeded()) {
    // A spare: the job ended well without it. Nothing left to heartbeat.
    StopHeartbeats();
    RendezvousResult done;
    done.job_succeeded = true;
    return done;
  }
  const v1::Assignment& a = resp.assignment();
  {
    MutexLock lock(&mu_);
    last_ = a;
    registered_ = true;
    running_ = true;
    event_sent_ = false;
    beat_now_ = true;
  }
  cv_.NotifyAll();
  RendezvousResult r;
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

void GrpcRendezvousClient::ReportFailure(int64_t round,
                                         const std::string& reason, bool retry,
                                         FailureDone done) {
  v1::ReportFailureRequest req;
  {
    MutexLock lock(&mu_);
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
    running_ = false;  // the agent restarts or stops on its own now
  }
  req.set_instance(instance_);
  req.set_round(round);
  req.set_reason(reason.substr(0, 4096));
  req.set_no_retry(!retry);
  const Clock::TimePoint deadline =
      clock_->Now() + options_.rendezvous.rpc_timeout;
  auto call = std::make_shared<Retry>();
  call->deadline = deadline;
  call->on_job = true;
  auto answer = std::make_shared<v1::ReportFailureResponse>();
  call->attempt = [this, req, answer, deadline](Finished finished) {
    StartAttempt(
        req, deadline,
        [this](auto* ctx, auto* q, auto* p, auto cb) {
          Stub()->async()->ReportFailure(ctx, q, p, std::move(cb));
        },
        answer, std::move(finished));
  };
  call->done = [this, answer, done](grpc::Status s) {
    if (!s.ok()) {
      done(FromGrpc(s, Target()));
      return;
    }
    done(answer->will_restart());
  };
  retries_.insert(call);
  Run(call);
}

void GrpcRendezvousClient::ReportSuccess(int64_t round,
                                         Clock::Duration barrier_timeout,
                                         Done done) {
  v1::ReportSuccessRequest req;
  {
    MutexLock lock(&mu_);
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
    running_ = false;
    in_barrier_ = true;
    barrier_lost_ = false;
  }
  req.set_instance(instance_);
  req.set_round(round);
  const Clock::TimePoint deadline = clock_->Now() + barrier_timeout;
  auto call = std::make_shared<Retry>();
  call->deadline = deadline;
  call->on_job = true;
  call->attempt = [this, req, deadline](Finished finished) {
    {
      MutexLock lock(&mu_);
      if (barrier_lost_) {
        PostToLoop([finished] {
          finished(grpc::Status(grpc::StatusCode::CANCELLED, "server lost"));
        });
        return;
      }
    }
    StartAttempt(
        req, deadline,
        [this](auto* ctx, auto* q, auto* p, auto cb) {
          Stub()->async()->ReportSuccess(ctx, q, p, std::move(cb));
        },
        std::shared_ptr<v1::ReportSuccessResponse>(), std::move(finished),
        /*barrier=*/true);
  };
  call->done = [this, barrier_timeout, done](grpc::Status s) {
    done(OnBarrierAnswer(s, barrier_timeout));
  };
  retries_.insert(call);
  Run(call);
}

Status GrpcRendezvousClient::OnBarrierAnswer(const grpc::Status& s,
                                             Clock::Duration barrier_timeout) {
  bool lost = false;
  {
    MutexLock lock(&mu_);
    in_barrier_ = false;
    lost = barrier_lost_;
  }
  if (s.ok()) {
    StopHeartbeats();
    return Status::Ok();
  }
  if (lost) {
    return UnavailableError(
        "exit barrier: rendezvous server " + Target() + " unreachable for " +
        WholeSeconds(options_.rendezvous.connection_lost_timeout) +
        " s (rdzv_conf connection_lost_timeout); gave up waiting for the "
        "other nodes (this node's workers succeeded)");
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return DeadlineExceededError(
        "exit barrier: not every node finished within " +
        WholeSeconds(barrier_timeout) + " s");
  }
  return FromGrpc(s, Target());
}

void GrpcRendezvousClient::Leave(std::function<void()> done) {
  auto rpc = std::make_shared<Rpc<v1::LeaveRequest, v1::LeaveResponse>>();
  bool joined;
  {
    MutexLock lock(&mu_);
    for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
    joined = !rdzv_id_.empty();
    rpc->req.set_rdzv_id(rdzv_id_);
    rpc->req.set_node_id(node_.node_id());
  }
  StopHeartbeats();
  // Calls waiting for their next attempt end now; those in flight end with
  // their cancelled RPC.
  std::set<std::shared_ptr<Retry>> waiting;
  for (const auto& retry : retries_) {
    if (retry->timer != 0) waiting.insert(retry);
  }
  for (const auto& retry : waiting) {
    PostToLoop([this, retry] {
      Complete(retry, grpc::Status(grpc::StatusCode::CANCELLED, "left"));
    });
  }
  if (!joined) {
    PostToLoop(std::move(done));
    return;
  }
  rpc->req.set_instance(instance_);
  rpc->req.set_reason("agent stopping");
  PrepareContext(&rpc->ctx);
  rpc->ctx.set_deadline(
      std::chrono::system_clock::now() +
      std::min<std::chrono::milliseconds>(options_.rendezvous.rpc_timeout,
                                          std::chrono::seconds(2)));
  StartCall(
      rpc,
      [this](auto* ctx, auto* q, auto* p, auto cb) {
        Stub()->async()->Leave(ctx, q, p, std::move(cb));
      },
      [this, done = std::move(done)](grpc::Status s) {
        if (!s.ok()) {
          DDP_LOG(WARNING) << "rendezvous leave: "
                           << FromGrpc(s, Target()).message();
        }
        done();
      });
}

}  // namespace ddprun::rendezvous::internal

namespace ddprun::rendezvous {

StatusOr<std::unique_ptr<RendezvousClient>> CreateGrpcRendezvousClient(
    const GrpcClientOptions& options, EventLoop* loop) {
  DDP_ASSIGN_OR_RETURN(Endpoint endpoint, ParseEndpoint(options.endpoint));
  auto channel = internal::MakeChannel(endpoint.ToString(), options.rendezvous);
  return std::unique_ptr<RendezvousClient>(new internal::GrpcRendezvousClient(
      options, std::move(endpoint), loop, std::move(channel)));
}

}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous::internal {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& endpoint,
                                           const RendezvousOptions& o) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!o.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.tls_ca_pem;
    ssl.pem_cert_chain = o.tls_cert_pem;
    ssl.pem_private_key = o.tls_key_pem;
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
  return grpc::CreateCustomChannel(endpoint, creds, args);
}

}  // namespace ddprun::rendezvous::internal
