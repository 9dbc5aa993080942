#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/event_loop.h"
#include "ddprun/common/status_or.h"
#include "rendezvous/client/rendezvous_client.h"
#include "rendezvous/options/rendezvous_options.h"

namespace ddprun::rendezvous {

// Where and how an agent reaches the rendezvous server.
struct GrpcClientOptions {
  // "host[:port]" or "[v6]:port" of the server (--rdzv_endpoint); the port
  // defaults to 29400. Required.
  std::string endpoint;
  // Timeouts, token, TLS (RendezvousOptions::is_host is not used here).
  RendezvousOptions rendezvous;
  // Failover (an agent that may host the endpoint itself): called when the
  // server does not answer, from the loop thread or the heartbeat thread;
  // it may start serving the endpoint in this process and returns true when
  // it did. The client then re-registers its round at once. Must be
  // thread-safe and cheap when it declines (a bind probe). Null: never.
  std::function<bool()> take_over;
  // Cross-host failover: "host:port" where this agent could serve the
  // rendezvous (its own address as other nodes reach it), sent in Join and
  // Heartbeat (NodeInfo.standby_endpoint); empty = none. A server that
  // allows failover names one node's standby as the successor in its
  // heartbeat replies. When it stops answering for
  // max(2 x heartbeat_interval, 1 s), its host refuses connections to its
  // port (up, the server gone: never on mere silence, which may be a
  // partition) and a last call that waits 1 s for a connection fails (an
  // agent on its own host takes its port over first), the successor calls
  // `host_standby`
  // (start serving at standby_endpoint in this process; true when it
  // serves), and every agent moves its client to the successor's endpoint
  // and re-registers its round. Called from the heartbeat thread; must be
  // thread-safe. Null: this agent never hosts a standby.
  std::string standby_endpoint;
  std::function<bool()> host_standby;
  // MASTER_PORT this node announces (used when it is group rank 0): > 0 =
  // this port (static mode's --master_port, served by the agent store);
  // 0 = a port verified free at each Join.
  int master_port = 0;
};

// The agent's RendezvousClient over gRPC ("grpc" backend), on gRPC's
// callback API: a call returns at once and its answer is posted to `loop`.
// Calls are retried with backoff (100 ms .. 2 s, timers on `loop`) while
// the server is unreachable (a restart) or rate-limits us, until their
// deadline; a call that meets a server without the job (restarted, or a
// failover) first re-registers the node's round. Heartbeats run on a
// thread of the client's own from the first Join until ReportSuccess or
// Leave, report the running round to a restarted server, and turn the
// server's news into RendezvousEvents (posted to `loop`); they also move
// the client to a successor endpoint on a cross-host failover (calls in
// flight are cancelled and retried there). Time (retries,
// connection_lost_timeout) is read from loop->clock().
// `loop` must outlive the client. INVALID_ARGUMENT for a bad endpoint.
StatusOr<std::unique_ptr<RendezvousClient>> CreateGrpcRendezvousClient(
    const GrpcClientOptions& options, EventLoop* loop);

}  // namespace ddprun::rendezvous
