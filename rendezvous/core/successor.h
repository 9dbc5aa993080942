#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddprun/v1/rendezvous.pb.h"

namespace ddprun::rendezvous {

// Cross-host failover of a rendezvous an agent hosts in-process: the node
// that serves it at its standby endpoint (NodeInfo.standby_endpoint) when
// the hosting agent dies and no agent on that agent's host can take its
// port over.
struct Successor {
  std::string node_id;
  std::string endpoint;
};

// The successor among `nodes` (a job's live nodes): the smallest node_id
// whose standby endpoint is set and whose host is none of `own_hosts` (the
// hosting agent's addresses: a standby there dies with it, or could bind
// the endpoint itself; a standby that is not "host:port" or "[v6]:port"
// never is). Deterministic, so that every node is told the same one.
// nullopt when there is none.
std::optional<Successor> ChooseSuccessor(
    const std::vector<v1::NodeInfo>& nodes,
    const std::vector<std::string>& own_hosts);

}  // namespace ddprun::rendezvous
