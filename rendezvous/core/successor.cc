#include "rendezvous/core/successor.h"

#include <algorithm>

#include "rendezvous/options/endpoint.h"

namespace ddprun::rendezvous {

std::optional<Successor> ChooseSuccessor(
    const std::vector<v1::NodeInfo>& nodes,
    const std::vector<std::string>& own_hosts) {
  std::optional<Successor> best;
  for (const v1::NodeInfo& node : nodes) {
    if (node.standby_endpoint().empty()) continue;
    // Agents write standbys with Endpoint::ToString; one that does not
    // parse back is nowhere the others could reach.
    StatusOr<Endpoint> standby =
        ParseEndpoint(node.standby_endpoint(), /*default_port=*/0);
    if (!standby.ok() || std::find(own_hosts.begin(), own_hosts.end(),
                                   standby->host) != own_hosts.end()) {
      continue;
    }
    if (!best || node.node_id() < best->node_id) {
      best = Successor{node.node_id(), node.standby_endpoint()};
    }
  }
  return best;
}

}  // namespace ddprun::rendezvous
