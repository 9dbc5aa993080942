#include "rendezvous/server/rendezvous_service.h"

#include <algorithm>
#include <string>

#include "common/logging.h"

namespace ddprun::rendezvous {

grpc::Status ToGrpcStatus(const ::ddprun::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      status.message());
}

namespace {

constexpr char kTokenKey[] = "x-ddprun-token";

// Compares in time that depends only on the lengths, not on where the
// strings differ.
bool ConstantTimeEquals(const std::string& a, const grpc::string_ref& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b.data()[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

std::string PeerHost(const std::string& peer) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    const size_t n = std::char_traits<char>::length(scheme);
    if (peer.compare(0, n, scheme) != 0) continue;
    std::string rest = peer.substr(n);
    if (!rest.empty() && rest.front() == '[') {
      const size_t close = rest.find(']');
      if (close != std::string::npos) return rest.substr(1, close - 1);
    }
    const size_t colon = rest.rfind(':');
    return colon == std::string::npos ? rest : rest.substr(0, colon);
  }
  return peer;
}

// A Join or ReportSuccess waiting for the state's answer. Deletes itself in
// OnDone, after exactly one Finish().
class ParkedCall : public grpc::ServerUnaryReactor {
 public:
  ParkedCall(RendezvousService* service, WaiterId id,
             RendezvousService::Replies replies)
      : service_(service), id_(id), replies_(replies) {}

  void Deliver(const Outcome& outcome) {
    if (outcome.status.ok() && replies_.join != nullptr) {
      *replies_.join->mutable_assignment() = outcome.assignment;
      replies_.join->set_job_succeeded(outcome.job_succeeded);
    }
    if (outcome.status.ok() && replies_.failure != nullptr) {
      *replies_.failure = outcome.failure;
    }
    Finish(ToGrpcStatus(outcome.status));
  }
  WaiterId id() const { return id_; }

  void OnCancel() override { service_->OnParkedCancelled(id_, this); }
  void OnDone() override { delete this; }

 private:
  RendezvousService* const service_;
  const WaiterId id_;
  const RendezvousService::Replies replies_;
};

RendezvousService::RendezvousService(Clock* clock, JobDefaults defaults,
                                     std::string token, StateLimits limits,
                                     bool failover,
                                     std::vector<std::string> own_hosts,
                                     std::string only_rdzv_id)
    : clock_(clock),
      token_(std::move(token)),
      failover_(failover),
      own_hosts_(std::move(own_hosts)),
      only_rdzv_id_(std::move(only_rdzv_id)),
      peer_limiter_(clock, limits.peer_rate_per_s, limits.peer_burst),
      status_limiter_(clock, limits.status_rate_per_s, limits.status_burst),
      close_limiter_(clock, limits.close_rate_per_s, limits.close_burst),
      leave_limiter_(clock, limits.leave_rate_per_s, limits.leave_burst),
      stacks_limiter_(clock, limits.stacks_rate_per_s, limits.stacks_burst),
      state_(clock, defaults, limits) {
  timer_ = std::thread([this] { TimerLoop(); });
}

RendezvousService::~RendezvousService() { StopTimer(); }

void RendezvousService::StopTimer() {
  {
    MutexLock lock(&mu_);
    stop_timer_ = true;
  }
  cv_.NotifyAll();
  if (timer_.joinable()) timer_.join();
}

bool RendezvousService::WaitUntilAllHeard(
    std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  while (!state_.AllHeard()) {
    if (!heard_cv_.WaitUntil(&mu_, deadline) &&
        std::chrono::steady_clock::now() >= deadline) {
      return state_.AllHeard();
    }
  }
  return true;
}

void RendezvousService::ReadState(
    const std::function<void(const RendezvousState&)>& read) const {
  MutexLock lock(&mu_);
  read(state_);
}

void RendezvousService::FinishAll() {
  std::vector<ParkedCall*> calls;
  {
    MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [id, call] : parked_) calls.push_back(call);
    parked_.clear();
  }
  for (ParkedCall* call : calls) {
    call->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "rendezvous server shutting down"));
  }
}

void RendezvousService::NoteAdoptedPeer(int fd, std::string host) {
  MutexLock lock(&limits_mu_);
  adopted_peers_["fd:" + std::to_string(fd)] = std::move(host);
}

std::string RendezvousService::PeerKey(grpc::CallbackServerContext* ctx) const {
  const std::string peer = ctx->peer();
  auto it = adopted_peers_.find(peer);
  return it != adopted_peers_.end() ? it->second : PeerHost(peer);
}

grpc::Status RendezvousService::Admit(grpc::CallbackServerContext* ctx,
                                      const Gate& gate) {
  if (!token_.empty()) {
    const auto& md = ctx->client_metadata();
    auto it = md.find(kTokenKey);
    if (it == md.end() || !ConstantTimeEquals(token_, it->second)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing or wrong rendezvous token (x-ddprun-token)");
    }
  }
  // An agent's server is its job's alone: a call for another job must not
  // create one there, nor complete a round that resets its store.
  if (!only_rdzv_id_.empty() && !gate.rdzv_id.empty() &&
      gate.rdzv_id != only_rdzv_id_) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "this rendezvous is hosted by an agent of job '" +
                            only_rdzv_id_ +
                            "' and serves only that job, not '" + gate.rdzv_id +
                            "' (run ddprun-rendezvous to serve several jobs)");
  }
  {
    MutexLock lock(&limits_mu_);
    const std::string peer = PeerKey(ctx);
    if (!peer_limiter_.Allow(peer) ||
        (gate.limiter != nullptr && !gate.limiter->Allow(peer))) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          std::string(gate.rpc) +
                              " rate limit exceeded for callers at " + peer +
                              "; slow down");
    }
  }
  MutexLock lock(&mu_);
  if (shutting_down_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "rendezvous server shutting down");
  }
  return grpc::Status::OK;
}

std::vector<RendezvousService::Delivery> RendezvousService::CollectLocked() {
  std::vector<Delivery> out;
  for (Outcome& o : state_.TakeOutcomes()) {
    auto it = parked_.find(o.waiter);
    if (it == parked_.end()) continue;  // cancelled meanwhile
    out.emplace_back(it->second, std::move(o));
    parked_.erase(it);
  }
  if (state_.TakeDeadlineChanged()) {
    wake_timer_ = true;
    cv_.NotifyOne();
  }
  heard_cv_.NotifyAll();
  return out;
}

void RendezvousService::Deliver(std::vector<Delivery> deliveries) {
  for (auto& [call, outcome] : deliveries) call->Deliver(outcome);
}

void RendezvousService::OnParkedCancelled(WaiterId id, ParkedCall* call) {
  std::vector<Delivery> deliveries;
  {
    MutexLock lock(&mu_);
    if (parked_.erase(id) == 0) return;  // already answered
    state_.CancelWaiter(id);
    deliveries = CollectLocked();
  }
  call->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"));
  Deliver(std::move(deliveries));
}

template <typename Fn>
grpc::ServerUnaryReactor* RendezvousService::Park(
    grpc::CallbackServerContext* ctx, const Gate& gate, Replies replies,
    Fn&& fn) {
  grpc::Status admitted = Admit(ctx, gate);
  if (!admitted.ok()) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(admitted);
    return reactor;
  }
  std::vector<Delivery> deliveries;
  ParkedCall* call;
  ::ddprun::Status status;
  {
    MutexLock lock(&mu_);
    call = new ParkedCall(this, next_waiter_++, replies);
    parked_[call->id()] = call;
    status = fn(state_, call->id());
    if (!status.ok()) parked_.erase(call->id());
    deliveries = CollectLocked();
  }
  if (!status.ok()) call->Finish(ToGrpcStatus(status));
  Deliver(std::move(deliveries));
  return call;
}

grpc::ServerUnaryReactor* RendezvousService::Join(
    grpc::CallbackServerContext* ctx, const v1::JoinRequest* request,
    v1::JoinResponse* response) {
  return Park(ctx, {request->rdzv_id(), nullptr, "Join"},
              Replies{response, nullptr},
              [&](RendezvousState& state, WaiterId id) {
                return state.Join(*request, id);
              });
}

grpc::ServerUnaryReactor* RendezvousService::ReportSuccess(
    grpc::CallbackServerContext* ctx, const v1::ReportSuccessRequest* request,
    v1::ReportSuccessResponse* response) {
  return Park(ctx, {request->rdzv_id(), nullptr, "ReportSuccess"}, Replies{},
              [&](RendezvousState& state, WaiterId id) {
                return state.ReportSuccess(*request, id);
              });
}

template <typename Fn>
grpc::ServerUnaryReactor* RendezvousService::Unary(
    grpc::CallbackServerContext* ctx, const Gate& gate, Fn&& fn) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  grpc::Status admitted = Admit(ctx, gate);
  if (!admitted.ok()) {
    reactor->Finish(admitted);
    return reactor;
  }
  std::vector<Delivery> deliveries;
  ::ddprun::Status status;
  {
    MutexLock lock(&mu_);
    status = fn(state_);
    deliveries = CollectLocked();
  }
  reactor->Finish(ToGrpcStatus(status));
  Deliver(std::move(deliveries));
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousService::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  return Unary(ctx, {request->rdzv_id(), nullptr, "Heartbeat"},
               [&](RendezvousState& state) -> ::ddprun::Status {
                 DDP_ASSIGN_OR_RETURN(*response, state.Heartbeat(*request));
                 response->set_failover(failover_);
                 if (failover_) {
                   if (std::optional<Successor> next =
                           state.SuccessorOf(request->rdzv_id(), own_hosts_)) {
                     response->set_successor_endpoint(next->endpoint);
                     response->set_successor_node_id(next->node_id);
                   }
                 }
                 return ::ddprun::Status::Ok();
               });
}

grpc::ServerUnaryReactor* RendezvousService::ReportFailure(
    grpc::CallbackServerContext* ctx, const v1::ReportFailureRequest* request,
    v1::ReportFailureResponse* response) {
  return Park(ctx, {request->rdzv_id(), nullptr, "ReportFailure"},
              Replies{nullptr, response},
              [&](RendezvousState& state, WaiterId id) {
                return state.ReportFailure(*request, id);
              });
}

grpc::ServerUnaryReactor* RendezvousService::ReplaceRank(
    grpc::CallbackServerContext* ctx, const v1::ReplaceRankRequest* request,
    v1::ReplaceRankResponse* response) {
  // Rare (each one spends the restart budget, or follows one that did):
  // the per-caller limit of the other rare calls.
  return Unary(ctx, {request->rdzv_id(), &leave_limiter_, "ReplaceRank"},
               [&](RendezvousState& state) -> ::ddprun::Status {
                 DDP_ASSIGN_OR_RETURN(*response, state.ReplaceRank(*request));
                 return ::ddprun::Status::Ok();
               });
}

grpc::ServerUnaryReactor* RendezvousService::Leave(
    grpc::CallbackServerContext* ctx, const v1::LeaveRequest* request,
    v1::LeaveResponse* response) {
  return Unary(ctx, {request->rdzv_id(), &leave_limiter_, "Leave"},
               [&](RendezvousState& state) { return state.Leave(*request); });
}

grpc::ServerUnaryReactor* RendezvousService::Close(
    grpc::CallbackServerContext* ctx, const v1::CloseRequest* request,
    v1::CloseResponse* response) {
  return Unary(ctx, {request->rdzv_id(), &close_limiter_, "Close"},
               [&](RendezvousState& state) { return state.Close(*request); });
}

grpc::ServerUnaryReactor* RendezvousService::Status(
    grpc::CallbackServerContext* ctx, const v1::StatusRequest* request,
    v1::StatusResponse* response) {
  return Unary(ctx, {request->rdzv_id(), &status_limiter_, "Status"},
               [&](RendezvousState& state) -> ::ddprun::Status {
                 if (request->rdzv_id().empty()) {
                   // A page at a time: this lock is the one heartbeats wait
                   // for.
                   *response = state.GetStatusPage(request->page_after());
                   return ::ddprun::Status::Ok();
                 }
                 DDP_ASSIGN_OR_RETURN(*response,
                                      state.GetStatus(request->rdzv_id()));
                 return ::ddprun::Status::Ok();
               });
}

grpc::ServerUnaryReactor* RendezvousService::Stacks(
    grpc::CallbackServerContext* ctx, const v1::StacksRequest* request,
    v1::StacksResponse* response) {
  return Unary(ctx, {request->rdzv_id(), &stacks_limiter_, "Stacks"},
               [&](RendezvousState& state) -> ::ddprun::Status {
                 DDP_ASSIGN_OR_RETURN(*response, state.Stacks(*request));
                 return ::ddprun::Status::Ok();
               });
}

void RendezvousService::TimerLoop() {
  using Steady = std::chrono::steady_clock;
  mu_.Lock();
  // A pass (Tick and NextDeadline visit every job) over a large state takes
  // a while (~0.1 s for 128000 nodes on a busy 2-core machine), and every
  // call that moves a deadline wakes the timer: it rests three times as
  // long as its last pass took, so it holds the lock at most a quarter of
  // the time and Joins and heartbeats are served meanwhile. A small state's
  // passes take microseconds: no deadline is noticeably late.
  Steady::time_point rest_until = Steady::time_point::min();
  while (!stop_timer_) {
    if (Steady::now() < rest_until) {
      (void)cv_.WaitUntil(&mu_, rest_until);
      continue;
    }
    const Steady::time_point pass_start = Steady::now();
    state_.Tick();
    std::vector<Delivery> deliveries = CollectLocked();
    wake_timer_ = false;
    if (!deliveries.empty()) {
      rest_until = pass_start + 4 * (Steady::now() - pass_start);
      mu_.Unlock();
      Deliver(std::move(deliveries));
      mu_.Lock();
      continue;
    }
    // Sleep until the next deadline, at most 1 s (the real clock can be
    // stepped by a FakeClock in tests, so never trust a long sleep).
    const Clock::TimePoint now = clock_->Now();
    Clock::TimePoint until = now + std::chrono::seconds(1);
    if (auto next = state_.NextDeadline(); next && *next < until) {
      until = *next;
    }
    rest_until = pass_start + 4 * (Steady::now() - pass_start);
    if (until <= now) continue;
    const auto real_until = Steady::now() + (until - now);
    while (!stop_timer_ && !wake_timer_ && cv_.WaitUntil(&mu_, real_until)) {
    }
  }
  mu_.Unlock();
}

}  // namespace ddprun::rendezvous
