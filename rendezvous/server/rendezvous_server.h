#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "rendezvous/core/rendezvous_job.h"
#include "rendezvous/core/rendezvous_state.h"
#include "rendezvous/server/rpc_stats.h"

namespace grpc {
class Channel;
class Server;
}

namespace ddprun::rendezvous {

class RendezvousService;

struct ServerOptions {
  // Required x-ddprun-token metadata on every call; empty = no token.
  std::string token;
  // TLS, PEM contents (not paths). Both cert and key set = TLS on; with
  // tls_ca_pem set too, clients must present a certificate signed by it.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_ca_pem;
  // Timeouts for jobs whose JobConfig leaves them 0, and the per-job node
  // limit (defaults.max_nodes_per_job).
  JobDefaults defaults;
  // Job count, per-node Join/Heartbeat rate limits and per-address limits
  // of every rpc.
  StateLimits limits;
  // Requests above this size are refused (RESOURCE_EXHAUSTED).
  int max_message_bytes = 64 * 1024;
  // Time source for the rendezvous logic; must outlive the server.
  Clock* clock = Clock::Real();
  // An agent hosts this server in-process: heartbeat replies say that
  // agents may take over the endpoint when it stops answering
  // (HeartbeatResponse.failover).
  bool failover = false;
  // With failover: the hosting agent's own addresses (the endpoint's host
  // and this machine's address towards it). Heartbeat replies name a
  // successor (HeartbeatResponse.successor_endpoint) among the nodes whose
  // standby endpoint is on none of them.
  std::vector<std::string> own_hosts;
  // No listening socket of its own: connections come from AdoptConnection
  // (an agent that serves the c10d store on the same port sorts them).
  // Insecure only (gRPC adopts descriptors without TLS).
  bool adopt_connections = false;
  // Non-empty: this server serves that job only (an agent hosts it for its
  // own job): a call naming another rdzv_id is PERMISSION_DENIED and
  // changes nothing.
  std::string only_rdzv_id;
};

// True for addresses only this machine can reach: 127.0.0.0/8, ::1,
// "localhost".
bool IsLoopbackHost(const std::string& host);

// The rendezvous gRPC server, embeddable: `ddprun-rendezvous` runs one, and
// an agent that hosts the rendezvous (--standalone, is_host) runs one
// in-process.
//
// Threading: Start/Shutdown from one thread (WaitUntilAllHeard from that
// thread too, between them); the server serves on gRPC's own threads plus
// one timer thread.

class RendezvousServer {
 public:
  RendezvousServer();
  ~RendezvousServer();  // Shutdown() with no grace
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // Listens on host:port (port 0 = any free port) and returns the bound
  // port. UNAVAILABLE if the address cannot be bound, INVALID_ARGUMENT for
  // bad TLS material, FAILED_PRECONDITION if already started. Logs a
  // WARNING when `host` is not a loopback address and neither a token nor
  // TLS protects the server (anyone who reaches it can join or close jobs).
  StatusOr<int> Start(const std::string& host, int port,
                      const ServerOptions& options);

  // Waits until every node of every job has been told its job's latest
  // news (a round ended, the job finished) or `deadline` passes: a hosting
  // agent that ends keeps serving until then, so that the other agents
  // learn the news instead of losing their server. True when they all were.
  bool WaitUntilAllHeard(std::chrono::steady_clock::time_point deadline);

  // Answers parked Joins/barriers with UNAVAILABLE (agents retry against the
  // next server), then stops, cancelling calls still running after `grace`.
  // All job state is lost (agents re-register it). Idempotent.
  void Shutdown(Clock::Duration grace = std::chrono::seconds(1));

  int port() const { return port_; }

  // With ServerOptions::adopt_connections: serves the connected socket `fd`
  // (takes it). Call between Start and Shutdown.
  void AdoptConnection(int fd);

  // For status pages in the same process (rendezvous/http/), between Start
  // and Shutdown, from any thread:
  // Runs `read(state)` under the state's mutex (RendezvousService::
  // ReadState); false when the server is not running.
  bool ReadState(const std::function<void(const RendezvousState&)>& read) const;
  // Every rpc served so far (counts, latencies); lives as long as this
  // object.
  const RpcStats& rpc_stats() const { return *rpc_stats_; }
  // A channel to this server inside the process (no socket), for actions
  // that go the rpcs' way (Stacks, Close): they are admitted (token),
  // counted and serialised like any client's. Null when not running.
  std::shared_ptr<grpc::Channel> InProcessChannel() const;

 private:
  std::unique_ptr<RpcStats> rpc_stats_;
  std::unique_ptr<RendezvousService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ddprun::rendezvous
