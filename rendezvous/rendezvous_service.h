#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/clock.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/rendezvous_state.h"

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
  // `failover`: set HeartbeatResponse.failover (an agent hosts us).
  // `clock` must outlive the service.
  RendezvousService(Clock* clock, JobDefaults defaults, std::string token,
                    StateLimits limits = {}, bool failover = false);
  ~RendezvousService() override;

  // Answers every parked call with UNAVAILABLE and refuses new calls
  // (server going down: agents retry against the next server).
  void FinishAll();
  // Stops and joins the timer thread. Idempotent.
  void StopTimer();

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
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Close(grpc::CallbackServerContext* ctx,
                                  const v1::CloseRequest* request,
                                  v1::CloseResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* request,
                                   v1::StatusResponse* response) override;

 private:
  friend class ParkedCall;
  using Delivery = std::pair<ParkedCall*, Outcome>;

  // Ok, or UNAUTHENTICATED / UNAVAILABLE (shutting down).
  grpc::Status Admit(grpc::CallbackServerContext* ctx) const;
  // A non-parking rpc: admits, runs `fn` (returns ddprun::Status) under
  // mu_, finishes.
  template <typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Fn&& fn);
  // A parking rpc: runs `fn(waiter_id)` under mu_; the reactor finishes
  // when the state delivers that waiter's Outcome (or at once on error).
  template <typename Fn>
  grpc::ServerUnaryReactor* Park(grpc::CallbackServerContext* ctx,
                                 Replies replies, Fn&& fn);
  // Under mu_: pairs the state's outcomes with their parked reactors and
  // wakes the timer if needed. Deliver() then finishes them outside mu_.
  std::vector<Delivery> CollectLocked();
  static void Deliver(std::vector<Delivery> deliveries);
  void OnParkedCancelled(WaiterId id, ParkedCall* call);
  void TimerLoop();

  Clock* const clock_;
  const std::string token_;
  const bool failover_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  RendezvousState state_;
  std::unordered_map<WaiterId, ParkedCall*> parked_;
  WaiterId next_waiter_ = 1;
  bool shutting_down_ = false;
  bool stop_timer_ = false;
  bool wake_timer_ = false;
  std::thread timer_;
};

// grpc::Status for a ddprun::Status (same numeric codes).
grpc::Status ToGrpcStatus(const ::ddprun::Status& status);

}  // namespace ddprun::rendezvous
