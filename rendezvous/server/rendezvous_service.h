#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/core/rate_limiter.h"
#include "rendezvous/core/rendezvous_state.h"

namespace ddprun::rendezvous {

class ParkedCall;

// The gRPC face of RendezvousState (callback API). Every rpc takes the one
// mutex, calls the state, and finishes; Join and ReportSuccess park their
// reactor (no thread held) until the state answers them. One timer thread
// calls RendezvousState::Tick() at NextDeadline().
//
// Threading: all methods are thread-safe. Lifetime: must outlive the
// grpc::Server it is registered with; call StopTimer() and FinishAll()
// before destroying it.
class RendezvousService final : public v1::Rendezvous::CallbackService {
 public:
  // `token`: required value of the x-ddprun-token metadata; empty = none.
  // `failover`: set HeartbeatResponse.failover (an agent hosts us) and
  // name a successor (ChooseSuccessor, never on one of `own_hosts`).
  // `only_rdzv_id`: non-empty = serve that job only (an agent hosts us for
  // its job): a call naming another is PERMISSION_DENIED and changes
  // nothing. `limits`' peer_* and per-rpc limits apply here, per caller
  // address (PeerHost). `clock` must outlive the service.
  RendezvousService(Clock* clock, JobDefaults defaults, std::string token,
                    StateLimits limits = {}, bool failover = false,
                    std::vector<std::string> own_hosts = {},
                    std::string only_rdzv_id = "");
  ~RendezvousService() override;

  // Answers every parked call with UNAVAILABLE and refuses new calls
  // (server going down: agents retry against the next server).
  void FinishAll();
  // Stops and joins the timer thread. Idempotent.
  void StopTimer();
  // Waits until every node of every job has been told its job's latest
  // news (RendezvousState::AllHeard) or the real clock reaches `deadline`.
  // Returns whether they all were.
  bool WaitUntilAllHeard(std::chrono::steady_clock::time_point deadline)
      EXCLUDES(mu_);
  // A connection handed over as descriptor `fd` (AddInsecureChannelFromFd,
  // whose calls name their peer "fd:<fd>") comes from `host`: its calls are
  // rate limited as that address's.
  void NoteAdoptedPeer(int fd, std::string host) EXCLUDES(limits_mu_);
  // Runs `read(state)` under the state's mutex, for status pages that copy
  // what they show (rendezvous/http/): `read` must be quick (a copy, no I/O)
  // and must not call back into the service.
  void ReadState(const std::function<void(const RendezvousState&)>& read) const
      EXCLUDES(mu_);

  // Where a parked call's answer goes (null: not that kind of call).
  struct Replies {
    v1::JoinResponse* join = nullptr;
    v1::ReportFailureResponse* failure = nullptr;
  };

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx,
                                 const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* ReportFailure(
      grpc::CallbackServerContext* ctx, const v1::ReportFailureRequest* request,
      v1::ReportFailureResponse* response) override;
  grpc::ServerUnaryReactor* ReportSuccess(
      grpc::CallbackServerContext* ctx, const v1::ReportSuccessRequest* request,
      v1::ReportSuccessResponse* response) override;
  grpc::ServerUnaryReactor* ReplaceRank(
      grpc::CallbackServerContext* ctx, const v1::ReplaceRankRequest* request,
      v1::ReplaceRankResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Close(grpc::CallbackServerContext* ctx,
                                  const v1::CloseRequest* request,
                                  v1::CloseResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* request,
                                   v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* Stacks(grpc::CallbackServerContext* ctx,
                                   const v1::StacksRequest* request,
                                   v1::StacksResponse* response) override;

 private:
  friend class ParkedCall;
  using Delivery = std::pair<ParkedCall*, Outcome>;

  // What a call must pass before it reaches the state: its job (for
  // only_rdzv_id; "" = none named) and the per-address limit of its rpc
  // (null = only the limit on every rpc).
  struct Gate {
    const std::string& rdzv_id;
    RateLimiter* limiter;
    const char* rpc;
  };
  // Ok, or UNAUTHENTICATED, PERMISSION_DENIED (another job),
  // RESOURCE_EXHAUSTED (rate limit) or UNAVAILABLE (shutting down).
  grpc::Status Admit(grpc::CallbackServerContext* ctx, const Gate& gate)
      EXCLUDES(mu_, limits_mu_);
  // The caller's address, the key of its rate limits.
  std::string PeerKey(grpc::CallbackServerContext* ctx) const
      REQUIRES(limits_mu_);
  // A non-parking rpc: admits, runs `fn(state_)` (returns ddprun::Status)
  // under mu_, finishes.
  template <typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx,
                                  const Gate& gate, Fn&& fn) EXCLUDES(mu_);
  // A parking rpc: runs `fn(state_, waiter_id)` under mu_; the reactor
  // finishes when the state delivers that waiter's Outcome (or at once on
  // error).
  template <typename Fn>
  grpc::ServerUnaryReactor* Park(grpc::CallbackServerContext* ctx,
                                 const Gate& gate, Replies replies, Fn&& fn)
      EXCLUDES(mu_);
  // Under mu_: pairs the state's outcomes with their parked reactors and
  // wakes the timer if needed. Deliver() then finishes them outside mu_.
  std::vector<Delivery> CollectLocked() REQUIRES(mu_);
  static void Deliver(std::vector<Delivery> deliveries);
  void OnParkedCancelled(WaiterId id, ParkedCall* call) EXCLUDES(mu_);
  void TimerLoop() EXCLUDES(mu_);

  Clock* const clock_;
  const std::string token_;
  const bool failover_;
  const std::vector<std::string> own_hosts_;
  const std::string only_rdzv_id_;

  // The per-address limits: their own lock, so that a flood of refused
  // calls never waits for (or holds up) the state's.
  Mutex limits_mu_;
  RateLimiter peer_limiter_ GUARDED_BY(limits_mu_);
  RateLimiter status_limiter_ GUARDED_BY(limits_mu_);
  RateLimiter close_limiter_ GUARDED_BY(limits_mu_);
  RateLimiter leave_limiter_ GUARDED_BY(limits_mu_);
  RateLimiter stacks_limiter_ GUARDED_BY(limits_mu_);
  // Adopted descriptors' peers ("fd:12" -> "10.0.0.2"); a reused
  // descriptor number is overwritten by its next adoption.
  std::unordered_map<std::string, std::string> adopted_peers_
      GUARDED_BY(limits_mu_);

  mutable Mutex mu_;
  CondVar cv_;        // wakes the timer thread
  CondVar heard_cv_;  // the state changed: WaitUntilAllHeard re-checks
  RendezvousState state_ GUARDED_BY(mu_);
  std::unordered_map<WaiterId, ParkedCall*> parked_ GUARDED_BY(mu_);
  WaiterId next_waiter_ GUARDED_BY(mu_) = 1;
  bool shutting_down_ GUARDED_BY(mu_) = false;
  bool stop_timer_ GUARDED_BY(mu_) = false;
  bool wake_timer_ GUARDED_BY(mu_) = false;
  std::thread timer_;
};

// grpc::Status for a ddprun::Status (same numeric codes).
grpc::Status ToGrpcStatus(const ::ddprun::Status& status);

// The address part of a gRPC peer string, the key of per-caller limits:
// "ipv4:10.0.0.2:5123" -> "10.0.0.2", "ipv6:[::1]:5123" -> "::1"; any
// other form is returned whole.
std::string PeerHost(const std::string& peer);

}  // namespace ddprun::rendezvous
