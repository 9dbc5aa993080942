#pragma once

// The one setup of the rendezvous tests over real sockets, as gloo's
// gloo/test/base_test.h is for its collective tests: a RendezvousServer in
// this process on 127.0.0.1:0 and agents' gRPC clients against it, each on
// a loop thread of its own (SyncClient, sync_client.h), with the requests,
// the concurrent joins, the event log and the Status reads the tests make.
// Failures to set up are Catch2 REQUIREs; every wait has a deadline. Test
// code only.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/server/rendezvous_server.h"
#include "tests/rendezvous/sync_client.h"

namespace ddprun::rendezvous::testing {

// Job "job"'s JoinRequest of agent `node` with `nproc` local ranks on
// 127.0.0.1, for min..max nodes and `max_restarts`.
JoinRequest AgentRequest(const std::string& node, int min, int max,
                         int nproc = 2, int max_restarts = 1);

// Records the events of a client (delivered on its loop thread).
class EventLog {
 public:
  RendezvousClient::EventHandler Handler();
  // The first event, once one arrived; nullopt after `timeout`.
  std::optional<RendezvousEvent> Wait(Clock::Duration timeout);
  size_t size();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RendezvousEvent> events_;
};

// The server, started with `options` on 127.0.0.1:0 by the constructor
// (which REQUIREs that it listens), and the clients of the test's agents.
// One thread (the test's) calls it; the clients it makes are the caller's
// and must go before it.
class RendezvousFixture {
 public:
  explicit RendezvousFixture(const ServerOptions& options = ServerOptions());
  RendezvousFixture(const RendezvousFixture&) = delete;
  RendezvousFixture& operator=(const RendezvousFixture&) = delete;

  int port() const { return port_; }
  std::string endpoint() const;  // "127.0.0.1:<port>"

  // A client of this server with the library's defaults.
  GrpcClientOptions ClientOptions() const;
  // A test agent's client: heartbeats every 200 ms, dropped after 2 s (not
  // 1 s: a loaded 2-core CI box must not drop a healthy agent), a 500 ms
  // last call, joins that give up after 20 s; `token` on every call.
  GrpcClientOptions AgentOptions(const std::string& token = "") const;
  // The client with `options` (REQUIREs that it was made).
  static std::unique_ptr<SyncClient> Client(const GrpcClientOptions& options);
  std::unique_ptr<SyncClient> Agent(const std::string& token = "") const;
  // `n` agents; agent i's events go to logs[i] where there is one (and
  // it is not null).
  std::vector<std::unique_ptr<SyncClient>> Agents(
      int n, const std::vector<EventLog*>& logs = {}) const;

  // A raw stub on a channel of its own (hostile or malformed calls).
  std::unique_ptr<v1::Rendezvous::Stub> Stub() const;
  // The server's Status of every job (REQUIREs an answer within 5 s).
  v1::StatusResponse Status(const std::string& token = "") const;

  // An outage: Shutdown(grace) loses every job's state; StartAgain serves
  // the same port with a fresh server of the same options (REQUIRE).
  void Shutdown(Clock::Duration grace);
  void StartAgain();

 private:
  ServerOptions options_;
  std::unique_ptr<RendezvousServer> server_;
  int port_ = 0;
};

// Joins every client concurrently (one thread each) as "node<i>" of job
// "job" with nprocs[i] (default 2) local ranks, deadline 15 s; the results
// in the clients' order.
std::vector<StatusOr<RendezvousResult>> JoinAll(
    std::vector<std::unique_ptr<SyncClient>>& clients, int min, int max,
    std::vector<int> nprocs = {}, int max_restarts = 1);

}  // namespace ddprun::rendezvous::testing
