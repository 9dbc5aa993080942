#include "agent/launch_options.h"

namespace ddprun::agent {

RendezvousMode ModeOf(const LaunchOptions& options) {
  if (options.standalone) return RendezvousMode::kStandalone;
  const bool grpc =
      options.rdzv_backend == "grpc" || options.rdzv_backend == "c10d";
  if (options.max_nodes == 1 && (!grpc || options.rdzv_endpoint.empty())) {
    return RendezvousMode::kLocal;
  }
  return grpc ? RendezvousMode::kGrpc : RendezvousMode::kStatic;
}

}  // namespace ddprun::agent
