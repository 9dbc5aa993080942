#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agent/rendezvous_client.h"

namespace ddprun::agent {

// The single-node rendezvous (--standalone, or static with --nnodes=1): every
// round has this node alone (group rank 0, world = local world size). The
// restart budget is counted here, locally, as torchrun's agent does.
// MASTER_PORT is --master_port when given, else a port verified free by
// binding it, picked afresh for every round. Never emits events. Confined to
// the agent's loop thread.
class LocalRendezvousClient : public RendezvousClient {
 public:
  struct Options {
    std::string backend = "standalone";  // for logs
    std::string master_addr = "127.0.0.1";
    std::optional<int> master_port;  // nullopt: a verified-free port
  };

  explicit LocalRendezvousClient(Options options);

  std::string Backend() const override { return options_.backend; }
  // Completes at once. Errors: kUnavailable when no free port can be bound.
  StatusOr<RendezvousResult> Join(const JoinRequest& request,
                                  Clock::TimePoint deadline) override;
  void SetEventHandler(EventHandler handler) override {}
  // True while restarts remain (and spends one).
  StatusOr<bool> ReportFailure(int64_t round, const std::string& reason,
                               bool retry) override;
  // Returns at once: there is no other node to wait for.
  Status ReportSuccess(int64_t round, Clock::Duration barrier_timeout) override;
  void Leave() override {}

 private:
  Options options_;
  int max_restarts_ = 0;
  int restarts_used_ = 0;
  int64_t next_round_ = 0;
};

// Binds a TCP socket to port 0 on all interfaces and returns the port the
// kernel chose, then closes it (torchrun's _get_socket_with_port). Errors:
// kUnavailable when socket/bind fails.
StatusOr<int> FindFreePort();

}  // namespace ddprun::agent
