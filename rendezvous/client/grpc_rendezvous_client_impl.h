#pragma once

// The gRPC rendezvous client's class, shared by its source files
// (grpc_rendezvous_client.cc: the calls; grpc_client_calls.cc: one call
// on gRPC's callback API, retries and re-registration;
// grpc_client_heartbeats.cc: the heartbeat thread and failover;
// grpc_client_failover.cc: the move to a successor endpoint). Internal
// to ddprun_rendezvous_client.

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/event_loop.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/client/endpoint.h"
#include "rendezvous/client/grpc_rendezvous_client.h"

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
  void ReportSuccess(int64_t round, Clock::Duration barrier_timeout,
                     Done done) override;
  void Leave(std::function<void()> done) override;

  // grpc_client_stacks.cc.
  bool SupportsStacks() const override { return true; }
  void SetStacksRequestHandler(StacksRequestHandler handler) override {
    stacks_handler_ = std::move(handler);
  }
  void AnswerStacks(uint64_t request_id,
                    std::vector<RankStackSummary> ranks) override;
  void GatherStacks(const std::string& reason,
                    std::vector<RankStackSummary> own,
                    Clock::TimePoint deadline, StacksDone done) override;
  void SetStepRates(std::vector<RankStepRate> rates) override;
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
  // One Stacks call (no retries: dumps are bounded and best effort);
  // `done` gets the answer on the loop.
  void CallStacks(const v1::StacksRequest& req, Clock::TimePoint deadline,
                  std::function<void(StatusOr<StacksAnswer>)> done);
  // Polls dump `id` until complete or `deadline` (loop thread).
  void PollStacks(uint64_t id, Clock::TimePoint deadline, StacksDone done);

  const GrpcClientOptions options_;
  const Endpoint endpoint_;
  EventLoop* const loop_;
  Clock* const clock_;
  uint64_t instance_ = 0;

  // Loop thread only.
  EventHandler handler_;
  StacksRequestHandler stacks_handler_;
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
  // This node's step rates (sent with heartbeats) and the job's median
  // from the last heartbeat's answer.
  std::vector<RankStepRate> rates_ GUARDED_BY(mu_);
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

}  // namespace ddprun::rendezvous::internal
