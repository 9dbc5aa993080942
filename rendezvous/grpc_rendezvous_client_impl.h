#pragma once

// The gRPC rendezvous client's class, shared by its two source files
// (grpc_rendezvous_client.cc: the calls; grpc_client_heartbeats.cc: the
// heartbeat thread and failover). Internal to ddprun_rendezvous_client.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "agent/rendezvous_client.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/grpc_client_options.h"

namespace ddprun::rendezvous::internal {

namespace v1 = ::ddprun::rendezvous::v1;
using agent::RendezvousEvent;
using agent::RendezvousEventType;
using SteadyClock = std::chrono::steady_clock;

inline Status FromGrpc(const grpc::Status& s, const std::string& endpoint) {
  if (s.ok()) return Status::Ok();
  return Status(static_cast<StatusCode>(s.error_code()),
                "rendezvous " + endpoint + ": " + s.error_message());
}

inline std::chrono::system_clock::time_point ToSystem(
    Clock::TimePoint deadline) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             deadline - SteadyClock::now());
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

class GrpcRendezvousClient final : public agent::RendezvousClient {
 public:
  GrpcRendezvousClient(const GrpcClientOptions& options,
                       std::shared_ptr<grpc::Channel> channel)
      : options_(options),
        channel_(channel),
        stub_(v1::Rendezvous::NewStub(channel)) {
    std::random_device rd;
    while (instance_ == 0) {
      instance_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
  }

  ~GrpcRendezvousClient() override { StopHeartbeats(); }

  std::string Backend() const override { return "grpc"; }

  StatusOr<agent::RendezvousResult> Join(const agent::JoinRequest& request,
                                         Clock::TimePoint deadline) override;

  void SetEventHandler(EventHandler handler) override {
    std::lock_guard<std::mutex> lock(mu_);
    handler_ = std::move(handler);
  }

  StatusOr<bool> ReportFailure(int64_t round, const std::string& reason,
                               bool retry) override;
  Status ReportSuccess(int64_t round, Clock::Duration barrier_timeout) override;
  void Leave() override;

 private:
  // Makes a call, retrying while the server is unreachable (restarting)
  // with backoff 100 ms .. 2 s until `deadline`.
  template <typename Call>
  grpc::Status CallWithRetry(Clock::TimePoint deadline, Call&& call);
  // CallWithRetry, and once more after re-registering this node's round
  // when the server does not know the job (it lost its state).
  template <typename Call>
  grpc::Status CallOnJob(Clock::TimePoint deadline, Call&& call);
  void PrepareContext(grpc::ClientContext* ctx) const;
  void StartHeartbeats();
  void StopHeartbeats();
  void HeartbeatLoop();
  // The Heartbeat this node sends now (call under mu_).
  v1::HeartbeatRequest HeartbeatRequestLocked() const;
  // While the server does not answer: lets this process take over hosting
  // its endpoint when the server allowed it (failover). True if it did.
  bool TryTakeOver();
  // Registers this node's round with a server that lost its state (it
  // restarted, or another agent took over hosting): one Heartbeat, at once.
  void Reregister();
  // The heartbeat thread's verdict on an unreachable server while the node
  // waits in the exit barrier: warns once, gives up (cancels the call)
  // after connection_lost_timeout. Under mu_.
  void WatchBarrierLocked(SteadyClock::duration unreachable);
  void Emit(RendezvousEventType type, const std::string& reason);

  // Join waits for the server as long as its deadline allows (wait for
  // ready); this says so once when the server stays unreachable for a few
  // seconds, instead of a silent wait of up to join_timeout.
  void WarnIfUnreachable(Clock::TimePoint deadline);

  const GrpcClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  uint64_t instance_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  EventHandler handler_;
  // What Join and Heartbeat send; set by the first Join.
  v1::JobConfig config_;
  v1::NodeInfo node_;
  std::string rdzv_id_;
  v1::Assignment last_;      // the last round this node got
  bool registered_ = false;  // heartbeats report last_ (server rebuilds)
  bool running_ = false;     // workers of last_ run: events are wanted
  bool event_sent_ = false;  // one event per round is enough
  bool paused_ = false;      // the last Join failed: no heartbeats
  // The server said that agents may take over its endpoint (failover).
  bool failover_ = false;
  // In the exit barrier (ReportSuccess), and whether the heartbeat thread
  // gave up on an unreachable server (it cancels the call).
  bool in_barrier_ = false;
  bool barrier_lost_ = false;
  // In-flight Join or exit barrier, for Leave() and the heartbeat thread.
  grpc::ClientContext* active_ = nullptr;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace ddprun::rendezvous::internal
