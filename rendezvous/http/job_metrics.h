#pragma once

#include <string>
#include <vector>

#include "ddprun/v1/rendezvous.pb.h"
#include "rendezvous/server/rpc_stats.h"

namespace ddprun::rendezvous::http {

// GET /metrics of the live view: every job's rounds, restarts by cause,
// nodes, stragglers, ETA; every rank's step rate, steps, heartbeat age and
// scalars; the server's rpc counts and latencies (README.md lists each
// family). Jobs are labelled `rdzv_id`, not `job` (Prometheus's own target
// label). Prometheus text format 0.0.4.
std::string RenderMetrics(const v1::StatusResponse& status,
                          const std::vector<RpcStats::Method>& rpcs,
                          const std::string& version);

}  // namespace ddprun::rendezvous::http
