#include "rendezvous/client/grpc_rendezvous_client.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/event_loop.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/net.h"
#include "common/thread_annotations.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/options/endpoint.h"

// GrpcRendezvousClient: RendezvousClient over gRPC's callback API, one
// class in one file. In order: the class; its construction and the calls
// (Join, ReportFailure, ReportSuccess, Leave); one call on the callback API
// with retries and re-registration; the heartbeat thread; the move to a
// successor endpoint (cross-host failover); stack dumps and step rates.

namespace ddprun::rendezvous::internal {

namespace v1 = ::ddprun::rendezvous::v1;

// A channel to `endpoint` ("host:port") with the client's credentials
// (TLS per `options`) and fast reconnects.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& endpoint,
                                           const RendezvousOptions& options);

inline Status FromGrpc(const grpc::Status& s, const std::string& endpoint) {
  if (s.ok()) return Status::Ok();
  return Status(static_cast<StatusCode>(s.error_code()),
                "rendezvous " + endpoint + ": " + s.error_message());
}

// Worth trying again later: the server is away (restarting), or it asked
// this node to slow down (rate limit).
inline bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          s.error_message().find("rate limit") != std::string::npos);
}

// The server does not know the job: it lost its state (a restart, or a
// failover to another hosting agent) and must learn the round again.
inline bool LostJob(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::NOT_FOUND &&
         s.error_message().find("unknown rendezvous") != std::string::npos;
}

// One unary call's context, request and response, alive until gRPC's
// callback has run and its answer has been read on the loop.
template <typename Request, typename Response>
struct Rpc {
  grpc::ClientContext ctx;
  Request req;
  Response resp;
};

// Threads: the public methods, the retry timers and every answer run on
// the loop thread (loop-only state below is unannotated); gRPC's callback
// threads only post to the loop; the heartbeat thread shares the state
// under mu_.
class GrpcRendezvousClient final : public RendezvousClient {
 public:
  GrpcRendezvousClient(const GrpcClientOptions& options, Endpoint endpoint,
                       EventLoop* loop, std::shared_ptr<grpc::Channel> channel);
  // Cancels what is in flight, joins the heartbeat thread and waits for
  // gRPC's callbacks of the cancelled calls (prompt after TryCancel).
  ~GrpcRendezvousClient() override;

  std::string Backend() const override { return "grpc"; }
  void Join(const JoinRequest& request, Clock::TimePoint deadline,
            JoinDone done) override;
  void SetEventHandler(EventHandler handler) override {
    handler_ = std::move(handler);
  }
  void ReportFailure(int64_t round, const std::string& reason, bool retry,
                     FailureDone done) override;
  void ReplaceRank(int64_t round, int rank, int64_t generation,
                   const std::string& reason, ReplaceDone done) override;
  void ReportHealed(int64_t round, int rank, int64_t generation,
                    double seconds) override;
  // Both: `req` with its job, node, round, rank and generation filled in.
  void SendReplaceRank(int64_t round, int rank, int64_t generation,
                       v1::ReplaceRankRequest req, ReplaceDone done);
  void ReportSuccess(int64_t round, Clock::Duration barrier_timeout,
                     Done done) override;
  void Leave(std::function<void()> done) override;

  // grpc_client_stacks.cc.
  bool SupportsStacks() const override { return true; }
  void SetStacksRequestHandler(StacksRequestHandler handler) override {
    stacks_handler_ = std::move(handler);
  }
  void SetGenerationHandler(GenerationHandler handler) override {
    generation_handler_ = std::move(handler);
  }
  void AnswerStacks(uint64_t request_id,
                    std::vector<diagnosis::StackSummary> ranks) override;
  void GatherStacks(const std::string& reason,
                    std::vector<diagnosis::StackSummary> own,
                    Clock::TimePoint deadline, StacksDone done) override;
  void SetStepRates(std::vector<RankStepRate> rates) override;
  void SetWorkerRestarts(int restarts) override;
  double JobMedianStepRate() const override;

 private:
  using Finished = std::function<void(grpc::Status)>;
  // A call retried with backoff (100 ms .. 2 s) while the server is
  // unreachable, until `deadline`. Loop thread only.
  struct Retry {
    Clock::TimePoint deadline;
    std::chrono::milliseconds backoff{100};
    // Re-register the round once when the server does not know the job.
    bool on_job = false;
    bool reregistered = false;
    EventLoop::TimerId timer = 0;  // non-zero: waiting for the next attempt
    // The client's generation_ when the last attempt started: a call
    // cancelled because the client moved to a successor is tried again.
    uint64_t generation = 0;
    // Starts one attempt; `finished` runs on the loop with its status.
    std::function<void(Finished finished)> attempt;
    Finished done;
  };

  // grpc_client_calls.cc.
  // Runs `issue(ctx, req, resp, callback)` (a stub_->async() method) on
  // `rpc`; `on_loop` gets the status on the loop thread. `barrier`: the
  // call is the exit barrier (the heartbeat thread may cancel it).
  template <typename Rpc, typename Issue>
  void StartCall(std::shared_ptr<Rpc> rpc, Issue issue, Finished on_loop,
                 bool barrier = false);
  // One attempt of a retried call: StartCall on a copy of `req` with
  // `deadline`, waiting for the channel to be ready; the response is copied
  // to *answer (null: not needed) before `finished` runs.
  template <typename Req, typename Resp, typename Issue>
  void StartAttempt(const Req& req, Clock::TimePoint deadline, Issue issue,
                    std::shared_ptr<Resp> answer, Finished finished,
                    bool barrier = false);
  void Run(std::shared_ptr<Retry> retry);
  void OnAttempt(const std::shared_ptr<Retry>& retry, const grpc::Status& s);
  void Complete(const std::shared_ptr<Retry>& retry, const grpc::Status& s);
  // Registers this node's round with a server that lost its state (it
  // restarted, or another agent took over hosting): one Heartbeat, then
  // `then` on the loop.
  void Reregister(std::function<void()> then);
  bool Stopped() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return stop_;
  }
  // Runs `fn` later on the loop, unless the client is gone by then.
  void PostToLoop(std::function<void()> fn);
  void PrepareContext(grpc::ClientContext* ctx) const;
  std::chrono::system_clock::time_point ToSystem(
      Clock::TimePoint deadline) const;
  // Join's answer turned into the agent's result (loop thread).
  StatusOr<RendezvousResult> OnJoinAnswer(const grpc::Status& s,
                                          const v1::JoinResponse& resp,
                                          Clock::TimePoint call_deadline);
  Status OnBarrierAnswer(const grpc::Status& s,
                         Clock::Duration barrier_timeout);
  // A Join that cannot reach its server for 5 s says so once.
  void WarnIfUnreachable(Clock::TimePoint deadline);

  // grpc_client_heartbeats.cc.
  void StartHeartbeats();
  // Stops the heartbeat thread soon (joined by the destructor).
  void StopHeartbeats() EXCLUDES(mu_);
  void HeartbeatLoop() EXCLUDES(mu_);
  // The Heartbeat this node sends now.
  v1::HeartbeatRequest HeartbeatRequestLocked() const REQUIRES(mu_);
  // While the server does not answer: lets this process take over hosting
  // its endpoint when the server allowed it (failover). True if it did.
  bool TryTakeOver() EXCLUDES(mu_);

  // grpc_client_failover.cc.
  // Cross-host failover, from the heartbeat thread, once the server has
  // been unreachable for `unreachable`: when a successor other than the
  // current endpoint is known, max(2 x heartbeat_interval, 1 s) have
  // passed, its host refuses connections (OldHostRefuses) and the server
  // does not answer within 1 s more (OldServerBack), hosts it (this node is the
  // successor) and moves the client there. True when the client moved.
  bool TryFailOver(Clock::Duration unreachable) EXCLUDES(mu_);
  // True when `endpoint`'s host refuses connections to its port within
  // 1 s (up, nothing listens: the server process is gone). Else warns once.
  bool OldHostRefuses(const std::string& endpoint) EXCLUDES(mu_);
  // One Heartbeat to the current server that waits up to 1 s for a
  // connection (the heartbeat thread's; Stop cancels it): true when it
  // answered, i.e. an agent on its host took it over meanwhile.
  bool OldServerBack() EXCLUDES(mu_);
  // Points the client at `endpoint` from now on: a new channel and stub,
  // calls in flight cancelled (their retries start over there, re-registering
  // first), generation_ bumped. Thread-safe.
  void SwitchTo(const std::string& endpoint) EXCLUDES(mu_);
  // The stub, channel and endpoint text the client uses now.
  std::shared_ptr<v1::Rendezvous::Stub> Stub() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return stub_;
  }
  std::shared_ptr<grpc::Channel> Channel() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return channel_;
  }
  std::string Target() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return target_;
  }
  uint64_t Generation() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return generation_;
  }
  // The heartbeat thread's verdict on an unreachable server while the node
  // waits in the exit barrier: warns once, gives up (cancels the call)
  // after connection_lost_timeout.
  void WatchBarrierLocked(Clock::Duration unreachable) REQUIRES(mu_);
  // Posts an event for the agent (one per round).
  void Emit(RendezvousEventType type, const std::string& reason) EXCLUDES(mu_);
  // A heartbeat's stacks_request: hands a dump not seen before to the
  // agent's handler on the loop (heartbeat thread).
  void OnStacksRequest(const v1::HeartbeatResponse& resp) EXCLUDES(mu_);
  void OnGeneration(const v1::HeartbeatResponse& resp) EXCLUDES(mu_);
  // One Stacks call (no retries: dumps are bounded and best effort);
  // `done` gets the answer on the loop.
  using StacksReply = std::function<void(StatusOr<v1::StacksResponse>)>;
  void CallStacks(const v1::StacksRequest& req, Clock::TimePoint deadline,
                  StacksReply done);
  // Sends parts[next...] of this node's answer (head: the dump's id and
  // this node), each after the one before was taken; `done` gets the last
  // reply or the first error (loop thread).
  void SendParts(v1::StacksRequest head,
                 std::shared_ptr<std::vector<std::vector<v1::RankStack>>> parts,
                 size_t next, Clock::TimePoint deadline, StacksReply done);
  // Polls dump `id` (its state only) until complete or `deadline`, then
  // reads its ranks (loop thread).
  void PollStacks(uint64_t id, Clock::TimePoint deadline, StacksDone done);
  // Reads dump `id`'s ranks page by page from index `from` into *answer
  // (which holds the dump's state), then `done` (loop thread). Ranks
  // whose page fails are named in missing_nodes.
  void FetchStacks(uint64_t id, uint32_t from,
                   std::shared_ptr<StacksAnswer> answer,
                   Clock::TimePoint deadline, StacksDone done);

  const GrpcClientOptions options_;
  const Endpoint endpoint_;
  EventLoop* const loop_;
  Clock* const clock_;
  uint64_t instance_ = 0;

  // Loop thread only.
  EventHandler handler_;
  StacksRequestHandler stacks_handler_;
  GenerationHandler generation_handler_;
  std::set<std::shared_ptr<Retry>> retries_;  // calls not yet answered
  bool joining_ = false;                      // a Join is in flight
  EventLoop::TimerId warn_timer_ = 0;
  std::thread heartbeat_;
  // Closures posted to the loop hold a weak reference: a client destroyed
  // before they run turns them into no-ops.
  std::shared_ptr<char> alive_ = std::make_shared<char>();

  mutable Mutex mu_;
  CondVar cv_;
  // What Join and Heartbeat send; set by the first Join.
  v1::JobConfig config_ GUARDED_BY(mu_);
  v1::NodeInfo node_ GUARDED_BY(mu_);
  std::string rdzv_id_ GUARDED_BY(mu_);
  v1::Assignment last_ GUARDED_BY(mu_);  // the last round this node got
  // Heartbeats report last_ (a restarted server rebuilds from it).
  bool registered_ GUARDED_BY(mu_) = false;
  bool running_ GUARDED_BY(mu_) = false;     // workers run: events wanted
  bool event_sent_ GUARDED_BY(mu_) = false;  // one event per round
  bool paused_ GUARDED_BY(mu_) = false;      // the last Join failed: no beats
  // A round just completed: beat now rather than a heartbeat_interval
  // later, so that the node learns at once whether it may take over (an
  // agent hosting the rendezvous killed right after the round otherwise
  // leaves survivors that never heard `failover`).
  bool beat_now_ GUARDED_BY(mu_) = false;
  // The server said that agents may take over its endpoint (failover).
  bool failover_ GUARDED_BY(mu_) = false;
  // Where the client goes when the server is gone and nobody on its host
  // took it over (HeartbeatResponse.successor_*); empty: nowhere.
  std::string successor_endpoint_ GUARDED_BY(mu_);
  std::string successor_node_ GUARDED_BY(mu_);
  // Said once that the old server's host does not answer (no failover).
  bool partition_warned_ GUARDED_BY(mu_) = false;
  // The server the client talks to now (the endpoint, or a successor) and
  // how many times it moved.
  std::string target_ GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_ GUARDED_BY(mu_);
  std::shared_ptr<v1::Rendezvous::Stub> stub_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  // In the exit barrier, and whether the heartbeat thread gave up on an
  // unreachable server (it cancels the call).
  bool in_barrier_ GUARDED_BY(mu_) = false;
  bool barrier_lost_ GUARDED_BY(mu_) = false;
  // Calls in flight (Leave and the destructor cancel them), the exit
  // barrier's among them, and the heartbeat thread's.
  std::set<grpc::ClientContext*> active_ GUARDED_BY(mu_);
  grpc::ClientContext* barrier_ GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* beat_ GUARDED_BY(mu_) = nullptr;
  // gRPC callbacks that have not returned yet (the destructor waits).
  int callbacks_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;  // left, finished or destroyed
  // The last stack dump handed to the agent (a heartbeat repeats it until
  // this node answers).
  uint64_t stacks_seen_ GUARDED_BY(mu_) = 0;
  // The newest generation passed to generation_handler_, and its round.
  int64_t generation_round_ GUARDED_BY(mu_) = 0;
  int64_t generation_seen_ GUARDED_BY(mu_) = 0;
  // This node's step rates (sent with heartbeats) and the job's median
  // from the last heartbeat's answer.
  std::vector<RankStepRate> rates_ GUARDED_BY(mu_);
  int worker_restarts_ GUARDED_BY(mu_) = 0;
  double job_median_ GUARDED_BY(mu_) = -1;
};

template <typename Rpc, typename Issue>
void GrpcRendezvousClient::StartCall(std::shared_ptr<Rpc> rpc, Issue issue,
                                     Finished on_loop, bool barrier) {
  {
    MutexLock lock(&mu_);
    active_.insert(&rpc->ctx);
    if (barrier) barrier_ = &rpc->ctx;
    ++callbacks_;
  }
  std::weak_ptr<char> alive = alive_;
  issue(&rpc->ctx, &rpc->req, &rpc->resp,
        [this, rpc, alive, on_loop = std::move(on_loop)](grpc::Status s) {
          // gRPC's thread: hand the answer to the loop and let go of
          // `this` (the destructor waits for callbacks_ == 0).
          loop_->Post([alive, rpc, on_loop, s] {
            if (!alive.expired()) on_loop(s);
          });
          MutexLock lock(&mu_);
          active_.erase(&rpc->ctx);
          if (barrier_ == &rpc->ctx) barrier_ = nullptr;
          --callbacks_;
          cv_.NotifyAll();
        });
}

template <typename Req, typename Resp, typename Issue>
void GrpcRendezvousClient::StartAttempt(const Req& req,
                                        Clock::TimePoint deadline, Issue issue,
                                        std::shared_ptr<Resp> answer,
                                        Finished finished, bool barrier) {
  auto attempt = std::make_shared<Rpc<Req, Resp>>();
  attempt->req = req;
  PrepareContext(&attempt->ctx);
  attempt->ctx.set_deadline(ToSystem(deadline));
  attempt->ctx.set_wait_for_ready(true);
  StartCall(
      attempt, std::move(issue),
      [attempt, answer, finished = std::move(finished)](grpc::Status s) {
        if (answer != nullptr) *answer = attempt->resp;
        finished(s);
      },
      barrier);
}

namespace {

// How long a Join call outlives its caller's deadline, waiting for the
// server's own join_timeout verdict (see Join).
constexpr std::chrono::seconds kServerVerdictGrace(3);

std::string WholeSeconds(Clock::Duration d) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A node's answer travels in parts below the server's 64 KiB request
// limit; each rank's text is cut to diagnosis::kMaxSummaryBytes already.
constexpr size_t kPartBytes = 48 * 1024;
// ranks_from past any dump: the reply carries the state only.
constexpr uint32_t kStateOnly = UINT32_MAX;
// Reading a large dump's pages may take this long past the deadline.
constexpr auto kFetchGrace = std::chrono::seconds(1);

void ToProto(const diagnosis::StackSummary& r, v1::RankStack* out) {
  out->set_rank(r.rank);
  out->set_pid(r.pid);
  out->set_group_rank(r.group_rank);
  out->set_host(r.host.substr(0, 256));
  out->set_stack(diagnosis::CutSummary(r.stack));
  out->set_missing(r.missing.substr(0, 256));
}

// `ranks` in parts of at most kPartBytes each (none: one empty part).
std::vector<std::vector<v1::RankStack>> SplitParts(
    const std::vector<diagnosis::StackSummary>& ranks) {
  std::vector<std::vector<v1::RankStack>> parts(1);
  size_t bytes = 0;
  for (const diagnosis::StackSummary& r : ranks) {
    v1::RankStack p;
    ToProto(r, &p);
    const size_t size = p.ByteSizeLong() + 8;  // + tag and length
    if (!parts.back().empty() && bytes + size > kPartBytes) {
      parts.emplace_back();
      bytes = 0;
    }
    bytes += size;
    parts.back().push_back(std::move(p));
  }
  return parts;
}

// The dump's state (no ranks: FetchStacks reads them).
StacksAnswer StateOf(const v1::StacksResponse& resp) {
  StacksAnswer a;
  a.request_id = resp.request_id();
  a.reason = resp.reason();
  a.complete = resp.complete();
  a.missing_nodes.assign(resp.missing_nodes().begin(),
                         resp.missing_nodes().end());
  return a;
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
  c->set_replace_lost_nodes(request.replace_lost_nodes);
  c->set_replace_wait_ms(static_cast<uint32_t>(
      std::min<int64_t>(request.replace_wait.count(), UINT32_MAX)));
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
  n->set_host(request.host.substr(0, 256));
  StatusOr<int> port = options_.master_port > 0
                           ? StatusOr<int>(options_.master_port)
                           : FreePort(addr);
  if (!port.ok()) {
    PostToLoop([done, s = port.status()] { done(s); });
    return;
  }
  n->set_master_port(*port);
  n->set_standby_endpoint(options_.standby_endpoint);
  req.set_unhealthy(request.unhealthy.substr(0, 4096));
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
  r.replaces_generation = a.replaces_generation();
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

void GrpcRendezvousClient::ReplaceRank(int64_t round, int rank,
                                       int64_t generation,
                                       const std::string& reason,
                                       ReplaceDone done) {
  v1::ReplaceRankRequest req;
  req.set_reason(reason.substr(0, 4096));
  SendReplaceRank(round, rank, generation, std::move(req), std::move(done));
}

void GrpcRendezvousClient::ReportHealed(int64_t round, int rank,
                                        int64_t generation, double seconds) {
  v1::ReplaceRankRequest req;
  req.set_healed(true);
  req.set_heal_seconds(seconds);
  SendReplaceRank(round, rank, generation, std::move(req),
                  [this](StatusOr<ReplaceAnswer> answer) {
                    if (!answer.ok()) {
                      DDP_LOG(DEBUG) << "heal report: "
                                     << answer.status().message();
                    }
                  });
}

void GrpcRendezvousClient::SendReplaceRank(int64_t round, int rank,
                                           int64_t generation,
                                           v1::ReplaceRankRequest req,
                                           ReplaceDone done) {
  {
    MutexLock lock(&mu_);
    req.set_rdzv_id(rdzv_id_);
    req.set_node_id(node_.node_id());
  }
  req.set_instance(instance_);
  req.set_round(round);
  req.set_rank(rank);
  req.set_generation(generation);
  const Clock::TimePoint deadline =
      clock_->Now() + options_.rendezvous.rpc_timeout;
  auto call = std::make_shared<Retry>();
  call->deadline = deadline;
  call->on_job = true;
  auto answer = std::make_shared<v1::ReplaceRankResponse>();
  call->attempt = [this, req, answer, deadline](Finished finished) {
    StartAttempt(
        req, deadline,
        [this](auto* ctx, auto* q, auto* p, auto cb) {
          Stub()->async()->ReplaceRank(ctx, q, p, std::move(cb));
        },
        answer, std::move(finished));
  };
  call->done = [this, answer, done](grpc::Status s) {
    if (!s.ok()) {
      done(FromGrpc(s, Target()));
      return;
    }
    ReplaceAnswer a;
    a.replaced = answer->replaced();
    a.generation = answer->generation();
    // Generations start at 1: a server that does not say (0) leaves rank 0
    // unnamed.
    if (!answer->replaced() && answer->healing_generation() > 0) {
      a.healing_rank = answer->healing_rank();
    }
    done(a);
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

// --------------------------------------------------------------------------
// GrpcRendezvousClient's call machinery: retries with backoff on the loop's
// timers, failover and re-registration between attempts. Every function here
// runs on the loop thread.

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

// --------------------------------------------------------------------------
// GrpcRendezvousClient's heartbeat thread: liveness, news for the agent, re-
// registration with a server that lost its state, failover, and the exit
// barrier's bound on an unreachable server.

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
  static constexpr v1::RankRate::State kStates[] = {
      v1::RankRate::STATE_RUNNING, v1::RankRate::STATE_SUCCEEDED,
      v1::RankRate::STATE_FAILED, v1::RankRate::STATE_STOPPED};
  for (const RankStepRate& r : rates_) {
    v1::RankRate* rate = req.add_rank_rates();
    rate->set_rank(r.rank);
    rate->set_steps(r.steps);
    rate->set_steps_per_s(r.per_s);
    rate->set_local_rank(r.local_rank);
    rate->set_pid(r.pid);
    rate->set_state(kStates[static_cast<int>(r.state)]);
    rate->set_straggler(r.straggler);
    rate->set_total_steps(r.total_steps);
    for (const auto& [name, value] : r.scalars) {
      v1::Scalar* sc = rate->add_scalars();
      sc->set_name(name);
      sc->set_value(value);
    }
  }
  req.set_worker_restarts(worker_restarts_);
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
      OnGeneration(resp);
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

// --------------------------------------------------------------------------
// GrpcRendezvousClient's cross-host failover: when the server an agent hosted
// is gone and nobody on its host took its port over, the successor it named
// hosts a fresh server at its standby endpoint and every client moves there.

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

// --------------------------------------------------------------------------
// GrpcRendezvousClient's stack dumps across nodes (the Stacks rpc): the
// heartbeat's request handed to the agent, its answer, and a dump this node
// starts and polls until every node answered; and the step rates its heartbeats
// carry (stragglers).

void GrpcRendezvousClient::OnStacksRequest(const v1::HeartbeatResponse& resp) {
  const uint64_t id = resp.stacks_request();
  if (id == 0) return;
  {
    MutexLock lock(&mu_);
    if (id == stacks_seen_) return;
    stacks_seen_ = id;
  }
  PostToLoop([this, id, reason = resp.stacks_reason()] {
    if (stacks_handler_) stacks_handler_(id, reason);
  });
}

void GrpcRendezvousClient::OnGeneration(const v1::HeartbeatResponse& resp) {
  const int64_t generation = resp.generation();
  if (generation <= 0) return;
  int64_t round = 0;
  {
    MutexLock lock(&mu_);
    // The server sets it only for the round this node runs.
    round = last_.round();
    if (round != resp.round()) return;
    if (round == generation_round_ && generation <= generation_seen_) return;
    generation_round_ = round;
    generation_seen_ = generation;
  }
  PostToLoop([this, round, generation] {
    if (generation_handler_) generation_handler_(round, generation);
  });
}

void GrpcRendezvousClient::CallStacks(const v1::StacksRequest& req,
                                      Clock::TimePoint deadline,
                                      StacksReply done) {
  auto rpc = std::make_shared<Rpc<v1::StacksRequest, v1::StacksResponse>>();
  rpc->req = req;
  PrepareContext(&rpc->ctx);
  rpc->ctx.set_deadline(ToSystem(
      std::min(deadline, clock_->Now() + options_.rendezvous.rpc_timeout)));
  StartCall(
      rpc,
      [this](auto* ctx, auto* q, auto* p, auto cb) {
        Stub()->async()->Stacks(ctx, q, p, std::move(cb));
      },
      [this, rpc, done = std::move(done)](grpc::Status s) {
        if (!s.ok()) {
          done(FromGrpc(s, Target()));
          return;
        }
        done(std::move(rpc->resp));
      });
}

void GrpcRendezvousClient::SendParts(
    v1::StacksRequest head,
    std::shared_ptr<std::vector<std::vector<v1::RankStack>>> parts, size_t next,
    Clock::TimePoint deadline, StacksReply done) {
  v1::StacksRequest req = head;
  req.set_part(static_cast<uint32_t>(next));
  req.set_more_parts(next + 1 < parts->size());
  req.set_ranks_from(kStateOnly);
  for (v1::RankStack& r : (*parts)[next]) *req.add_ranks() = std::move(r);
  std::weak_ptr<char> alive = alive_;
  CallStacks(req, deadline,
             [this, alive, head = std::move(head), parts, next, deadline,
              done](StatusOr<v1::StacksResponse> reply) mutable {
               if (alive.expired()) return;
               if (!reply.ok() || next + 1 >= parts->size()) {
                 done(std::move(reply));
                 return;
               }
               head.set_request_id(reply->request_id());
               head.clear_reason();
               SendParts(std::move(head), parts, next + 1, deadline, done);
             });
}

void GrpcRendezvousClient::AnswerStacks(
    uint64_t request_id, std::vector<diagnosis::StackSummary> ranks) {
  v1::StacksRequest head;
  {
    MutexLock lock(&mu_);
    if (stop_ || rdzv_id_.empty()) return;
    head.set_rdzv_id(rdzv_id_);
    head.set_node_id(node_.node_id());
  }
  head.set_instance(instance_);
  head.set_request_id(request_id);
  auto parts = std::make_shared<std::vector<std::vector<v1::RankStack>>>(
      SplitParts(ranks));
  SendParts(std::move(head), parts, 0,
            clock_->Now() + options_.rendezvous.rpc_timeout,
            [request_id](StatusOr<v1::StacksResponse> answer) {
              if (!answer.ok()) {
                DDP_LOG(WARNING) << "answering stack dump " << request_id
                                 << ": " << answer.status().message();
              }
            });
}

void GrpcRendezvousClient::GatherStacks(
    const std::string& reason, std::vector<diagnosis::StackSummary> own,
    Clock::TimePoint deadline, StacksDone done) {
  v1::StacksRequest head;
  {
    MutexLock lock(&mu_);
    if (stop_ || rdzv_id_.empty()) {
      PostToLoop([done] {
        done(Status(StatusCode::kFailedPrecondition,
                    "not in a rendezvous job"));
      });
      return;
    }
    head.set_rdzv_id(rdzv_id_);
    head.set_node_id(node_.node_id());
  }
  head.set_instance(instance_);
  head.set_reason(reason.substr(0, 256));
  auto parts = std::make_shared<std::vector<std::vector<v1::RankStack>>>(
      SplitParts(own));
  SendParts(
      std::move(head), parts, 0, deadline,
      [this, deadline, done](StatusOr<v1::StacksResponse> reply) {
        if (!reply.ok()) {
          done(reply.status());
          return;
        }
        {
          // This node answered with the request: its heartbeat
          // need not hand the same dump to the agent again.
          MutexLock lock(&mu_);
          stacks_seen_ = std::max(stacks_seen_, reply->request_id());
        }
        if (reply->complete() || clock_->Now() + kPollInterval >= deadline) {
          FetchStacks(reply->request_id(), 0,
                      std::make_shared<StacksAnswer>(StateOf(*reply)),
                      deadline + kFetchGrace, done);
          return;
        }
        PollStacks(reply->request_id(), deadline, done);
      });
}

void GrpcRendezvousClient::SetStepRates(std::vector<RankStepRate> rates) {
  MutexLock lock(&mu_);
  rates_ = std::move(rates);
}

void GrpcRendezvousClient::SetWorkerRestarts(int restarts) {
  MutexLock lock(&mu_);
  worker_restarts_ = restarts;
}

double GrpcRendezvousClient::JobMedianStepRate() const {
  MutexLock lock(&mu_);
  return job_median_;
}

void GrpcRendezvousClient::PollStacks(uint64_t id, Clock::TimePoint deadline,
                                      StacksDone done) {
  std::weak_ptr<char> alive = alive_;
  loop_->RunAt(clock_->Now() + kPollInterval, [this, alive, id, deadline,
                                               done] {
    if (alive.expired()) return;
    v1::StacksRequest req;
    {
      MutexLock lock(&mu_);
      req.set_rdzv_id(rdzv_id_);
    }
    req.set_request_id(id);
    req.set_ranks_from(kStateOnly);
    CallStacks(
        req, deadline,
        [this, id, deadline, done](StatusOr<v1::StacksResponse> reply) {
          if (!reply.ok()) {
            done(reply.status());
            return;
          }
          if (reply->complete() || clock_->Now() + kPollInterval >= deadline) {
            FetchStacks(id, 0, std::make_shared<StacksAnswer>(StateOf(*reply)),
                        deadline + kFetchGrace, done);
            return;
          }
          PollStacks(id, deadline, done);
        });
  });
}

void GrpcRendezvousClient::FetchStacks(uint64_t id, uint32_t from,
                                       std::shared_ptr<StacksAnswer> answer,
                                       Clock::TimePoint deadline,
                                       StacksDone done) {
  v1::StacksRequest req;
  {
    MutexLock lock(&mu_);
    req.set_rdzv_id(rdzv_id_);
  }
  req.set_request_id(id);
  req.set_ranks_from(from);
  std::weak_ptr<char> alive = alive_;
  CallStacks(req, deadline,
             [this, alive, id, from, answer, deadline,
              done](StatusOr<v1::StacksResponse> reply) {
               if (alive.expired()) return;
               if (!reply.ok()) {
                 // What was read stays; the rest is named, not dropped.
                 answer->complete = false;
                 answer->missing_nodes.push_back(
                     "ranks from index " + std::to_string(from) +
                     " of the dump (not read: " + reply.status().message() +
                     ")");
                 done(std::move(*answer));
                 return;
               }
               for (const v1::RankStack& r : reply->ranks()) {
                 answer->ranks.push_back({r.rank(), r.pid(), r.group_rank(),
                                          r.host(), r.stack(), r.missing()});
               }
               if (reply->ranks_next() > from) {
                 FetchStacks(id, reply->ranks_next(), answer, deadline, done);
                 return;
               }
               done(std::move(*answer));
             });
}

}  // namespace ddprun::rendezvous::internal
