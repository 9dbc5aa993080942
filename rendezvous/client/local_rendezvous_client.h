#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/event_loop.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::rendezvous {

// The single-node rendezvous (static or grpc with --nnodes=1 and no
// endpoint): every round has this node alone (group rank 0, world = local
// world size). The restart budget is counted here, locally, as torchrun's
// agent does. MASTER_PORT is --master_port when given, else a port verified
// free by binding it, picked afresh for every round. Never emits events.
// Every answer is posted to `loop`, which must outlive the client; the
// client's own state is touched on the loop thread only.
class LocalRendezvousClient : public RendezvousClient {
 public:
  struct Options {
    std::string backend = "standalone";  // for logs
    std::string master_addr = "127.0.0.1";
    std::optional<int> master_port;  // nullopt: a verified-free port
  };

  LocalRendezvousClient(Options options, EventLoop* loop);

  std::string Backend() const override { return options_.backend; }
  // Answers at once. Errors: kUnavailable when no free port can be bound.
  void Join(const JoinRequest& request, Clock::TimePoint deadline,
            JoinDone done) override;
  void SetEventHandler(EventHandler handler) override {}
  // True while restarts remain (and spends one).
  void ReportFailure(int64_t round, const std::string& reason, bool retry,
                     FailureDone done) override;
  // Answers at once: there is no other node to wait for.
  // Spends one restart, as ReportFailure does.
  void ReplaceRank(int64_t round, int rank, int64_t generation,
                   const std::string& reason, ReplaceDone done) override;
  void ReportSuccess(int64_t round, Clock::Duration barrier_timeout,
                     Done done) override;
  void Leave(std::function<void()> done) override;

 private:
  Options options_;
  EventLoop* const loop_;
  int max_restarts_ = 0;
  int restarts_used_ = 0;
  int64_t next_round_ = 0;
};

}  // namespace ddprun::rendezvous
