#pragma once

#include <memory>
#include <string>

#include "agent/cli/launch_options.h"
#include "agent/hosting/rendezvous_host.h"
#include "common/event_loop.h"
#include "ddprun/common/status_or.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// The rendezvous of one ddprun launch: the client the agent uses and, when
// this agent hosts it, the in-process server. Destroys the client before the
// server.
struct RendezvousSetup {
  RendezvousSetup();
  RendezvousSetup(RendezvousSetup&&) noexcept;
  RendezvousSetup& operator=(RendezvousSetup&&) noexcept;
  ~RendezvousSetup();

  // The server this agent hosts (serving() now, or after a failover);
  // null: this agent never hosts.
  std::unique_ptr<RendezvousHost> server;
  std::unique_ptr<rendezvous::RendezvousClient> client;
  // Address to announce as this node's MASTER_ADDR candidate instead of
  // --local_addr ("" = keep it). Static mode: node 0 announces --master_addr.
  std::string local_addr;
  // Static mode: --node_rank is a hint the round must honour exactly.
  bool static_node_rank = false;
};

// Builds the rendezvous of ModeOf(`options`) (launch_options.h), its client
// answering on `loop` (which must outlive it):
// - --standalone: this agent hosts the gRPC rendezvous server in-process on
//   127.0.0.1 and a free port (token: the given one, else a random one) and
//   joins it as a one-node job;
// - the static backend with --nnodes=1 (and grpc with --nnodes=1 and no
//   endpoint): the single-node LocalRendezvousClient, no server;
// - --rdzv_backend=grpc|c10d with --rdzv_endpoint HOST[:PORT]: the gRPC
//   client; this agent also hosts the server on PORT when HOST is this host
//   (or rdzv_conf is_host=true; is_host=false never hosts). An auto-detected
//   host whose port is taken (another agent on this host hosts it) joins as
//   a client that takes over hosting if that agent dies (failover: its
//   client calls RendezvousHost::TakeOver when the server stops answering).
//   Every such agent (unless is_host=false), on any host, also stands by
//   at its own address towards the endpoint (rdzv_conf standby_port, else
//   the endpoint's port): when the server named it the successor and
//   stops answering, it hosts there and every client moves to it
//   (cross-host failover, rendezvous/README.md);
// - the static backend with --nnodes=N>1: the gRPC rendezvous at
//   --master_addr:--master_port, hosted by --node_rank 0, min=max=N, node
//   ranks as hints (group rank = node rank). Workers get MASTER_ADDR =
//   --master_addr, MASTER_PORT = --master_port and
//   TORCHELASTIC_USE_AGENT_STORE=True: node 0's agent serves their c10d
//   TCPStore on that same port beside the rendezvous
//   (agent/hosting/agent_store.h; torchrun's agent store), so the job needs
//   that one port open. With rdzv_conf TLS (gRPC adopts no TLS connections)
//   the rendezvous keeps the port and the workers get a port node 0
//   verified free, rank 0's worker hosting the store (UsesAgentStore()
//   false): open both.
// The token is options.rendezvous.token (rdzv_conf token=/token_file=, else
// $DDPRUN_RDZV_TOKEN); the embedded server requires the same token. With
// rdzv_conf tls_ca, tls_cert and tls_key a hosting agent serves mutual TLS
// with its own certificate. Blocks only to bind a server. Errors carry one
// clear line: INVALID_ARGUMENT = the options contradict each other (bad
// input, exit 2); anything else (UNAVAILABLE: the port is taken or not
// local) is a runtime failure (exit 1).
StatusOr<RendezvousSetup> MakeRendezvous(const LaunchOptions& options,
                                         EventLoop* loop);

// Where a server this agent hosts for an endpoint (or --master_addr) host
// listens, and with it the agent store: the address itself when it is a
// numeric address of this host (127.0.0.1 included); the loopback
// 127.0.0.1 for a loopback name ("localhost": every node means itself by
// it, so no other host needs to reach it); every interface (0.0.0.0) for
// any other name, which other nodes may resolve to an address this host
// does not list (Debian maps its own hostname to 127.0.1.1).
std::string HostedBindAddress(const std::string& endpoint_host);

}  // namespace ddprun::agent
