#include "agent/cli/launch_options.h"

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

bool UsesAgentStore(const LaunchOptions& options) {
  const rendezvous::RendezvousOptions& r = options.rendezvous;
  return ModeOf(options) == RendezvousMode::kStatic && r.tls_ca_pem.empty() &&
         r.tls_cert_pem.empty() && r.tls_key_pem.empty();
}

bool ReplacesFailedRanks(const LaunchOptions& options) {
  if (options.restart_scope != LaunchOptions::RestartScope::kFailed) {
    return false;
  }
  return ModeOf(options) != RendezvousMode::kStatic || UsesAgentStore(options);
}

bool WorkersUseAgentStore(const LaunchOptions& options) {
  return UsesAgentStore(options) || ReplacesFailedRanks(options);
}

}  // namespace ddprun::agent
