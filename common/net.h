#pragma once

#include <chrono>
#include <string>

#include "ddprun/common/status_or.h"

// Socket probes shared by the launcher and the worker runtime: which port
// is free, which is taken, which local address reaches a host. Each call
// opens and closes its own socket; nothing is sent on the network (the
// route probe connects a UDP socket, which sends no packet). Thread-safe;
// blocks only as long as name resolution of a host name does.
namespace ddprun {

// A TCP port free on `addr` right now: bound to port 0, read back and
// released (torchrun's _get_socket_with_port; another process may take it
// before the caller binds it). `addr` empty: the IPv4 wildcard 0.0.0.0. An
// `addr` that cannot be bound here (a NAT address, a name that does not
// resolve) falls back to the wildcard. UNAVAILABLE when no port can be
// bound.
StatusOr<int> FreePort(const std::string& addr = "");

// True when something already holds `host`:`port` (a bind with
// SO_REUSEADDR, as gRPC sets it, fails with EADDRINUSE on one of the
// addresses `host` resolves to). `host` may be a name or a numeric address
// ("0.0.0.0" = the wildcard). INVALID_ARGUMENT when `host` does not
// resolve.
StatusOr<bool> PortInUse(const std::string& host, int port);

// True when a TCP connection to `port` on the loopback address (127.0.0.1,
// then ::1) is accepted: accelerate's is_port_in_use rule. False when
// nothing answers.
bool LoopbackPortAccepts(int port);

// True when `host` refuses a TCP connection to `port` (a reset: the host
// is up and nothing listens there), on every address it resolves to.
// False when one accepts, or nothing answers within `timeout` (a host that
// is down, or a network partition), or `host` does not resolve. Blocks up
// to `timeout` per address (plus name resolution).
bool ConnectRefused(const std::string& host, int port,
                    std::chrono::milliseconds timeout);

// The local address (numeric, e.g. "10.0.0.5") this host's kernel uses as
// the source towards `host`:`port`: an address the peer can reach us at,
// never a name that may not resolve there. NOT_FOUND when `host` does not
// resolve or no route leads to it.
StatusOr<std::string> SourceAddressTowards(const std::string& host, int port);

}  // namespace ddprun
