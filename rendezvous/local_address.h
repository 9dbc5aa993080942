#pragma once

#include <string>

#include "common/status_or.h"

namespace ddprun::rendezvous {

// The local IP this host uses to reach `endpoint` ("host[:port]"):
// routable by construction (never an FQDN that may not resolve). Empty if
// it cannot be determined.
std::string RouteSourceIp(const std::string& endpoint);

// A TCP port free on `addr` right now (bound, read back, released); any
// local address when `addr` is empty or not bindable here. UNAVAILABLE if
// none.
StatusOr<int> FreePort(const std::string& addr);

}  // namespace ddprun::rendezvous
