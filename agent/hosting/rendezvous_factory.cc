#include "agent/hosting/rendezvous_factory.h"

#include <arpa/inet.h>

#include <random>

#include "common/logging.h"
#include "common/net.h"
#include "rendezvous/options/endpoint.h"
#include "rendezvous/client/grpc_rendezvous_client.h"
#include "rendezvous/client/local_rendezvous_client.h"
#include "rendezvous/server/rendezvous_server.h"

namespace ddprun::agent {
namespace {

using rendezvous::Endpoint;
using rendezvous::GrpcClientOptions;
using rendezvous::LocalRendezvousClient;

// --standalone hosts the same gRPC rendezvous server a multi-node job uses,
// in-process on 127.0.0.1 and a free port, so a single-node job has exactly
// the semantics (rounds, the restart budget, exit barrier) of one node of a
// multi-node job. It costs ~10 ms and ~5 MB of RSS per launch (measured
// against the former LocalRendezvousClient path: `--nproc_per_node=4
// --no_python true`, 50 vs 60 ms, VmHWM 12.7 vs 17.3 MB). Only this process
// knows the port; a random token keeps other local users out unless one was
// given (then `ddprun-rendezvous --status` can read the job with it).

bool IsNumericIp(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// True when something already listens on host:port.
bool PortTaken(const std::string& host, int port) {
  return PortInUse(host, port).value_or(false);
}

GrpcClientOptions ClientOptions(const LaunchOptions& options,
                                const std::string& endpoint) {
  GrpcClientOptions o;
  o.endpoint = endpoint;
  o.rendezvous = options.rendezvous;
  return o;
}

// The server an agent hosts on `bind_host`:`port` for clients using
// `client`. With TLS the hosting node's own certificate (rdzv_conf
// tls_cert/tls_key, valid for the endpoint's name or IP) serves as the
// server's, and tls_ca checks every client's: mutual TLS, as every node
// holds a certificate anyway.
// `own_hosts`: this agent's addresses (ServerOptions::own_hosts: the
// successor is on none of them). The server serves `rdzv_id` only: a
// request for another job must neither create jobs in this agent nor
// complete rounds (in static mode each round empties the workers' store).
StatusOr<std::unique_ptr<RendezvousHost>> MakeHost(
    const std::string& bind_host, int port, const GrpcClientOptions& client,
    const std::string& rdzv_id, std::vector<std::string> own_hosts = {}) {
  const rendezvous::RendezvousOptions& r = client.rendezvous;
  rendezvous::ServerOptions so;
  so.token = r.token;
  so.failover = true;
  so.only_rdzv_id = rdzv_id;
  so.own_hosts = std::move(own_hosts);
  if (!r.tls_ca_pem.empty() || !r.tls_cert_pem.empty() ||
      !r.tls_key_pem.empty()) {
    if (r.tls_ca_pem.empty() || r.tls_cert_pem.empty() ||
        r.tls_key_pem.empty()) {
      return InvalidArgumentError(
          "--rdzv_conf tls_*: an agent that hosts the rendezvous serves "
          "mutual TLS and needs all of tls_ca, tls_cert and tls_key (its "
          "certificate must be valid for the endpoint's name or IP)");
    }
    so.tls_cert_pem = r.tls_cert_pem;
    so.tls_key_pem = r.tls_key_pem;
    so.tls_ca_pem = r.tls_ca_pem;
  }
  return std::make_unique<RendezvousHost>(bind_host, port, so, client.endpoint);
}

// Hosts the server now (see MakeHost).
StatusOr<std::unique_ptr<RendezvousHost>> Host(
    const std::string& bind_host, int port, const GrpcClientOptions& client,
    const std::string& rdzv_id, std::vector<std::string> own_hosts = {},
    bool quiet = false) {
  DDP_ASSIGN_OR_RETURN(
      std::unique_ptr<RendezvousHost> host,
      MakeHost(bind_host, port, client, rdzv_id, std::move(own_hosts)));
  DDP_RETURN_IF_ERROR(host->Serve(quiet).status());
  return host;
}

// The client of `server`'s endpoint. A server that is not serving (yet) is
// a standby: the client takes over hosting when the server stops answering
// (at the endpoint, or at the server's standby endpoint when it is the
// successor).
StatusOr<RendezvousSetup> Connect(std::unique_ptr<RendezvousHost> server,
                                  GrpcClientOptions client, EventLoop* loop) {
  RendezvousSetup setup;
  if (server != nullptr) {
    RendezvousHost* host = server.get();
    client.take_over = [host] { return host->TakeOver(); };
    client.standby_endpoint = host->standby_endpoint();
    if (!client.standby_endpoint.empty()) {
      client.host_standby = [host] { return host->HostStandby(); };
    }
  }
  setup.server = std::move(server);
  DDP_ASSIGN_OR_RETURN(setup.client,
                       rendezvous::CreateGrpcRendezvousClient(client, loop));
  return setup;
}

// --rdzv_backend=grpc|c10d --rdzv_endpoint=HOST[:PORT].
StatusOr<RendezvousSetup> MakeGrpc(const LaunchOptions& options,
                                   EventLoop* loop) {
  if (options.rdzv_endpoint.empty()) {
    return InvalidArgumentError("--rdzv_backend=" + options.rdzv_backend +
                                " needs --rdzv_endpoint HOST[:PORT]");
  }
  // Port 0 (`host:0`, torchrun's `localhost:0`) = host on any free port.
  DDP_ASSIGN_OR_RETURN(Endpoint ep,
                       rendezvous::ParseEndpoint(options.rdzv_endpoint, 0));
  const std::string& text = options.rdzv_endpoint;
  const bool any_port = text.size() > 2 && text.substr(text.size() - 2) == ":0";
  if (ep.port == 0 && !any_port) ep.port = 29400;
  const std::optional<bool>& is_host = options.rendezvous.is_host;
  GrpcClientOptions client = ClientOptions(options, ep.ToString());
  const bool host_it =
      is_host.has_value() ? *is_host : rendezvous::IsThisHost(ep.host);
  // Cross-host failover: every agent that may host stands by at its own
  // address towards the endpoint (as the other nodes reach it), at the
  // endpoint's port unless rdzv_conf standby_port says otherwise.
  const std::string me =
      ep.port == 0 ? "" : SourceAddressTowards(ep.host, ep.port).value_or("");
  const int standby_port = options.rendezvous.standby_port.value_or(ep.port);
  auto with_standby = [&](std::unique_ptr<RendezvousHost> host) {
    if (!me.empty()) host->SetStandby(me, standby_port);
    return host;
  };
  if (!host_it) {
    if (ep.port == 0) {
      return InvalidArgumentError("--rdzv_endpoint " + text +
                                  ": port 0 needs this agent to host the "
                                  "rendezvous (is_host=false given?)");
    }
    if (is_host.has_value() || me.empty()) {
      return Connect(nullptr, client, loop);  // is_host=false: never hosts
    }
    // Never serves the endpoint (port 0), only its standby; not even that
    // without a certificate of its own to serve TLS with (tls_ca alone
    // checks the server: an agent of an external server).
    StatusOr<std::unique_ptr<RendezvousHost>> standby =
        MakeHost("", 0, client, options.rdzv_id);
    if (!standby.ok()) return Connect(nullptr, client, loop);
    return Connect(with_standby(std::move(standby).value()), client, loop);
  }
  const std::string bind_host = HostedBindAddress(ep.host);
  std::vector<std::string> own = {ep.host};
  if (bind_host != "0.0.0.0") own.push_back(bind_host);
  if (!me.empty()) own.push_back(me);
  const bool auto_host = !is_host.has_value();
  if (auto_host && ep.port != 0 && PortTaken(bind_host, ep.port)) {
    // torchrun's rule: several agents on the host of the endpoint; the
    // first one to bind hosts it, the others join (probed first so that a
    // taken port is not a gRPC error line). They stand by to take over.
    DDP_LOG(INFO) << "rendezvous " << ep.ToString()
                  << " is already served on this host: joining it";
    DDP_ASSIGN_OR_RETURN(
        std::unique_ptr<RendezvousHost> standby,
        MakeHost(bind_host, ep.port, client, options.rdzv_id, own));
    return Connect(with_standby(std::move(standby)), client, loop);
  }
  // Another agent on this host may bind between the probe and here.
  StatusOr<std::unique_ptr<RendezvousHost>> server =
      Host(bind_host, ep.port, client, options.rdzv_id, own,
           /*quiet=*/auto_host);
  if (!server.ok()) {
    if (!auto_host || server.status().code() != StatusCode::kUnavailable) {
      return Status(server.status().code(), "hosting the rendezvous at " +
                                                ep.ToString() + ": " +
                                                server.status().message());
    }
    DDP_LOG(INFO) << "rendezvous " << ep.ToString()
                  << " is already served on this host: joining it";
    DDP_ASSIGN_OR_RETURN(
        std::unique_ptr<RendezvousHost> standby,
        MakeHost(bind_host, ep.port, client, options.rdzv_id, own));
    return Connect(with_standby(std::move(standby)), client, loop);
  }
  if (ep.port == 0) {
    // Hosted on a port only this agent knew: nobody can stand by for it.
    ep.port = *(*server)->Serve(false);
    client.endpoint = ep.ToString();
  }
  return Connect(with_standby(std::move(server).value()), client, loop);
}

// Static --nnodes=N>1 over the gRPC rendezvous: node 0 hosts it at
// --master_addr:--master_port.
StatusOr<RendezvousSetup> MakeStatic(const LaunchOptions& options,
                                     EventLoop* loop) {
  if (options.min_nodes != options.max_nodes) {
    return InvalidArgumentError(
        "--nnodes=" + std::to_string(options.min_nodes) + ":" +
        std::to_string(options.max_nodes) +
        ": the static backend needs a fixed node count (use "
        "--rdzv_backend=grpc for an elastic range)");
  }
  Endpoint ep;
  ep.host = options.master_addr;
  ep.port = options.master_port.value_or(29500);
  if (ep.port == 0) {
    return InvalidArgumentError(
        "--master_port=0: a multi-node static job needs a port every node "
        "knows");
  }
  GrpcClientOptions client = ClientOptions(options, ep.ToString());
  const bool agent_store = UsesAgentStore(options);
  if (agent_store) client.master_port = ep.port;
  std::unique_ptr<RendezvousHost> server;
  if (options.node_rank == 0) {
    const std::string bind_host = HostedBindAddress(ep.host);
    StatusOr<std::unique_ptr<RendezvousHost>> hosted =
        MakeHost(bind_host, ep.port, client, options.rdzv_id);
    if (hosted.ok()) {
      if (agent_store) (*hosted)->EnableAgentStore();
      Status served = (*hosted)->Serve(/*quiet=*/false).status();
      if (!served.ok()) hosted = served;
    }
    if (!hosted.ok()) {
      return Status(hosted.status().code(),
                    "--node_rank=0 hosts the rendezvous on --master_port=" +
                        std::to_string(ep.port) + ": " +
                        hosted.status().message());
    }
    server = std::move(hosted).value();
  }
  DDP_ASSIGN_OR_RETURN(RendezvousSetup setup,
                       Connect(std::move(server), client, loop));
  if (options.node_rank == 0) setup.local_addr = options.master_addr;
  setup.static_node_rank = true;
  return setup;
}

std::string RandomToken() {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) token.push_back(kHex[rd() % 16]);
  return token;
}

// --standalone: the embedded server on 127.0.0.1, any free port. Workers
// still get --local_addr (else 127.0.0.1) as MASTER_ADDR.
StatusOr<RendezvousSetup> MakeStandalone(const LaunchOptions& options,
                                         EventLoop* loop) {
  const std::string host = "127.0.0.1";
  Endpoint ep;
  ep.host = host;
  GrpcClientOptions client = ClientOptions(options, ep.ToString());
  rendezvous::RendezvousOptions& r = client.rendezvous;
  if (r.token.empty()) r.token = RandomToken();
  // Loopback inside one process: rdzv_conf tls_* has nothing to protect.
  r.tls_ca_pem.clear();
  r.tls_cert_pem.clear();
  r.tls_key_pem.clear();
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousHost> server,
                       Host(host, 0, client, options.rdzv_id));
  ep.port = *server->Serve(false);
  client.endpoint = ep.ToString();
  return Connect(std::move(server), client, loop);
}

std::unique_ptr<rendezvous::RendezvousClient> MakeLocal(
    const LaunchOptions& options, EventLoop* loop) {
  LocalRendezvousClient::Options rdzv;
  rdzv.backend = options.rdzv_backend;
  rdzv.master_addr = options.master_addr;
  if (options.master_port.has_value() && *options.master_port != 0) {
    rdzv.master_port = options.master_port;
  }
  return std::make_unique<LocalRendezvousClient>(rdzv, loop);
}

}  // namespace

std::string HostedBindAddress(const std::string& endpoint_host) {
  if (IsNumericIp(endpoint_host) &&
      (rendezvous::IsLoopbackHost(endpoint_host) ||
       rendezvous::IsThisHost(endpoint_host))) {
    return endpoint_host;
  }
  // "localhost" names this host on every node: nobody elsewhere can mean
  // this agent by it, so nobody elsewhere needs to reach it.
  if (rendezvous::IsLoopbackHost(endpoint_host)) return "127.0.0.1";
  return "0.0.0.0";
}

RendezvousSetup::RendezvousSetup() = default;
RendezvousSetup::RendezvousSetup(RendezvousSetup&&) noexcept = default;
RendezvousSetup& RendezvousSetup::operator=(RendezvousSetup&&) noexcept =
    default;
RendezvousSetup::~RendezvousSetup() { client.reset(); }

StatusOr<RendezvousSetup> MakeRendezvous(const LaunchOptions& options,
                                         EventLoop* loop) {
  InstallGrpcLogRouting();
  rendezvous::http::LiveViewOptions view;
  if (options.http_port >= 0) {
    view.host = options.http_host;
    view.port = options.http_port;
    view.read_token = options.http_token;
    view.admin_token = options.http_admin_token;
    view.version = DDPRUN_VERSION;
    DDP_RETURN_IF_ERROR(rendezvous::http::CheckLiveViewOptions(view));
  }
  StatusOr<RendezvousSetup> setup = InternalError("unknown rendezvous mode");
  switch (ModeOf(options)) {
    case RendezvousMode::kStandalone:
      setup = MakeStandalone(options, loop);
      break;
    case RendezvousMode::kLocal:
      setup = RendezvousSetup();
      setup->client = MakeLocal(options, loop);
      break;
    case RendezvousMode::kGrpc:
      setup = MakeGrpc(options, loop);
      break;
    case RendezvousMode::kStatic:
      setup = MakeStatic(options, loop);
      break;
  }
  if (!setup.ok() || options.http_port < 0) return setup;
  if (setup->server == nullptr) {
    DDP_LOG(WARNING) << "--http_port: this agent hosts no rendezvous server "
                        "(a single node without --standalone, or "
                        "is_host=false): no live view";
    return setup;
  }
  if (Status s = setup->server->EnableLiveView(view); !s.ok()) {
    return Status(s.code(), "live view: " + s.message());
  }
  return setup;
}

}  // namespace ddprun::agent
