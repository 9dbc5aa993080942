#pragma once

#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::rendezvous {

// A parsed --rdzv_endpoint.
struct Endpoint {
  std::string host;  // without IPv6 brackets
  int port = 0;
  // "host:port", with brackets for IPv6: what gRPC channels take.
  std::string ToString() const;
};

// Parses "host", "host:port", "[v6]:port" or "[v6]". A missing port is
// `default_port` (torchrun's c10d uses 29400). INVALID_ARGUMENT for an empty
// host or a port outside 1..65535 (0 allowed only when default_port is 0).
StatusOr<Endpoint> ParseEndpoint(const std::string& text,
                                 int default_port = 29400);

// torchrun's is_host rule: true if `host` names this machine: "localhost",
// this machine's hostname or FQDN, or an address assigned to one of its
// interfaces (every address `host` resolves to is checked). Never blocks
// longer than name resolution does.
bool IsThisHost(const std::string& host);

}  // namespace ddprun::rendezvous
