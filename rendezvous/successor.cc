#include "rendezvous/successor.h"

#include <algorithm>

namespace ddprun::rendezvous {

std::string EndpointHost(const std::string& endpoint) {
  if (!endpoint.empty() && endpoint.front() == '[') {
    const size_t close = endpoint.find(']');
    if (close != std::string::npos) return endpoint.substr(1, close - 1);
    return endpoint;
  }
  const size_t colon = endpoint.find(':');
  // No port, or more than one colon: a bare IPv6 address.
  if (colon == std::string::npos ||
      endpoint.find(':', colon + 1) != std::string::npos) {
    return endpoint;
  }
  return endpoint.substr(0, colon);
}

std::optional<Successor> ChooseSuccessor(
    const std::vector<v1::NodeInfo>& nodes,
    const std::vector<std::string>& own_hosts) {
  std::optional<Successor> best;
  for (const v1::NodeInfo& node : nodes) {
    if (node.standby_endpoint().empty()) continue;
    const std::string host = EndpointHost(node.standby_endpoint());
    if (host.empty() || std::find(own_hosts.begin(), own_hosts.end(), host) !=
                            own_hosts.end()) {
      continue;
    }
    if (!best || node.node_id() < best->node_id) {
      best = Successor{node.node_id(), node.standby_endpoint()};
    }
  }
  return best;
}

}  // namespace ddprun::rendezvous
