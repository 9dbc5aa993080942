#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/mutex.h"
#include "ddprun/common/status_or.h"
#include "agent/hosting/agent_store.h"
#include "common/thread_annotations.h"
#include "rendezvous/http/live_view.h"
#include "rendezvous/server/rendezvous_server.h"

namespace ddprun::agent {

// The rendezvous server an agent hosts in-process at one endpoint, now or
// later. An agent whose --rdzv_endpoint is on its own host may serve it:
// the first agent to bind the port does (torchrun's is_host rule), and
// when that agent dies, the port is free again and a surviving agent on
// the host takes over (TakeOver(), called by its rendezvous client when
// the server stops answering). The new server starts empty; the agents
// rebuild the job from their running rounds, as after a server restart.
// An agent on another host cannot bind the endpoint's address: it may
// stand by at an address of its own (SetStandby) and serve there when the
// server named it as the successor (HostStandby(), called by its client;
// every client moves there).
//
// Threading: thread-safe. The server runs on gRPC's threads.
class RendezvousHost {
 public:
  // `bind_host`:`port` is where to listen (port 0 = any free port, for
  // Serve() only); `options` as for RendezvousServer::Start; `endpoint`
  // names it in log lines.
  RendezvousHost(std::string bind_host, int port,
                 rendezvous::ServerOptions options, std::string endpoint);
  ~RendezvousHost();  // Shutdown() with no grace
  RendezvousHost(const RendezvousHost&) = delete;
  RendezvousHost& operator=(const RendezvousHost&) = delete;

  // Static multi-node mode: Serve() also serves the workers' c10d store on
  // the same port (agent/hosting/agent_store.h): the port's listener is an
  // AgentStore that hands gRPC connections to the rendezvous server, and
  // every completed round of the agent's job (ServerOptions::only_rdzv_id)
  // empties the store before its Joins are answered.
  // No TLS (rdzv_conf tls_*) with it. Call before Serve().
  void EnableAgentStore() EXCLUDES(mu_);

  // Starts serving and returns the bound port. UNAVAILABLE when the port is
  // taken (another process serves it); other errors as
  // RendezvousServer::Start. `quiet`: gRPC's own error line about a bind
  // race lost to another agent is not printed.
  StatusOr<int> Serve(bool quiet) EXCLUDES(mu_);

  // Failover: serves the endpoint if nobody does (its port is free). True
  // when this call started serving it, false when it serves already or
  // the port is taken. Logs one line when it takes over.
  bool TakeOver() EXCLUDES(mu_);

  // Cross-host failover: `host`:`port` is where this agent serves the
  // rendezvous if it is named the successor (host: its own address as the
  // other nodes reach it). Call before the host is shared.
  void SetStandby(std::string host, int port) EXCLUDES(mu_);
  // "host:port" of the standby; empty when there is none.
  std::string standby_endpoint() const EXCLUDES(mu_);
  // Serves at the standby address (a fresh server; its successor is
  // chosen among the nodes not on `host`). True when it serves now (this
  // call started it, or it served already); false without a standby,
  // after Shutdown, or when the bind fails (logged). Logs nothing on
  // success: the client says what happened.
  bool HostStandby() EXCLUDES(mu_);

  // The live view (ddprun --http_port) of whichever server this host runs,
  // now and after a takeover: starts it at once when serving (its error:
  // the port is taken), and with every server started later (a failure
  // then is a warning). The view reads with the server's token.
  Status EnableLiveView(rendezvous::http::LiveViewOptions options)
      EXCLUDES(mu_);

  // The agent store's keys (EnableAgentStore; restart scope "failed"):
  // AgentStore::Set/Get, nothing without a store.
  void SetStoreKey(const std::string& key, std::string value) EXCLUDES(mu_);
  std::optional<std::string> GetStoreKey(const std::string& key) const
      EXCLUDES(mu_);

  bool serving() const EXCLUDES(mu_);
  // While serving: keeps serving until every other agent has been told the
  // job's latest news (RendezvousServer::WaitUntilAllHeard) or the real
  // clock reaches `deadline`. Call from the thread that calls Shutdown.
  void WaitUntilAllHeard(std::chrono::steady_clock::time_point deadline)
      EXCLUDES(mu_);
  // Stops serving (parked calls get UNAVAILABLE). Idempotent.
  void Shutdown(Clock::Duration grace) EXCLUDES(mu_);

 private:
  StatusOr<int> ServeWithStore() REQUIRES(mu_);
  // Starts the live view on server_ when one is enabled.
  Status StartViewLocked() REQUIRES(mu_);

  const std::string bind_host_;
  const int port_;
  const rendezvous::ServerOptions options_;
  const std::string endpoint_;
  mutable Mutex mu_;
  bool agent_store_ GUARDED_BY(mu_) = false;
  // Declared before server_: the server's round hook uses the store, and
  // the store hands connections to the server; Shutdown stops the store
  // first.
  std::unique_ptr<AgentStore> store_ GUARDED_BY(mu_);
  std::unique_ptr<rendezvous::RendezvousServer> server_ GUARDED_BY(mu_);
  // No takeover after the agent's own shutdown.
  bool shut_down_ GUARDED_BY(mu_) = false;
  std::string standby_host_ GUARDED_BY(mu_);
  int standby_port_ GUARDED_BY(mu_) = 0;
  std::optional<rendezvous::http::LiveViewOptions> view_options_
      GUARDED_BY(mu_);
  // Reads server_: declared after it, stopped before it.
  std::unique_ptr<rendezvous::http::LiveView> view_ GUARDED_BY(mu_);
};

// Routes gRPC's own log lines through DDP_LOG (errors as warnings); lines
// are dropped while a RendezvousHost may lose a bind race.
void InstallGrpcLogRouting();

}  // namespace ddprun::agent
