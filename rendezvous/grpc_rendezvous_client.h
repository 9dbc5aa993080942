#pragma once

#include <memory>
#include <string>

#include "agent/rendezvous_client.h"
#include "common/status_or.h"
#include "rendezvous/grpc_client_options.h"

namespace ddprun::rendezvous {

// The agent's RendezvousClient over gRPC ("grpc" backend). Joins retry with
// backoff while the server is unreachable (server restart), heartbeats run
// on an own thread from the first Join until ReportSuccess/Leave, and
// re-register the running round with a restarted server.
StatusOr<std::unique_ptr<agent::RendezvousClient>> CreateGrpcRendezvousClient(
    const GrpcClientOptions& options);

}  // namespace ddprun::rendezvous
