#include "tests/rendezvous/rendezvous_fixture.h"

#include <chrono>
#include <future>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "ddprun_catch.h"

namespace ddprun::rendezvous::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;

JoinRequest AgentRequest(const std::string& node, int min, int max, int nproc,
                         int max_restarts) {
  JoinRequest r;
  r.run_id = "job";
  r.node_id = node;
  r.local_world_size = nproc;
  r.local_addr = "127.0.0.1";
  r.min_nodes = min;
  r.max_nodes = max;
  r.max_restarts = max_restarts;
  return r;
}

RendezvousFixture::RendezvousFixture(const ServerOptions& options)
    : options_(options), server_(std::make_unique<RendezvousServer>()) {
  StatusOr<int> port = server_->Start("127.0.0.1", 0, options_);
  REQUIRE(port.ok());
  REQUIRE(*port > 0);
  port_ = *port;
}

std::string RendezvousFixture::endpoint() const {
  return "127.0.0.1:" + std::to_string(port_);
}

GrpcClientOptions RendezvousFixture::ClientOptions() const {
  GrpcClientOptions o;
  o.endpoint = endpoint();
  return o;
}

GrpcClientOptions RendezvousFixture::AgentOptions(
    const std::string& token) const {
  GrpcClientOptions o = ClientOptions();
  o.rendezvous.token = token;
  o.rendezvous.heartbeat_interval = milliseconds(200);
  o.rendezvous.heartbeat_timeout = milliseconds(2000);
  o.rendezvous.last_call_timeout = milliseconds(500);
  o.rendezvous.join_timeout = seconds(20);
  return o;
}

std::unique_ptr<SyncClient> RendezvousFixture::Client(
    const GrpcClientOptions& options) {
  auto client = SyncClient::Grpc(options);
  REQUIRE(client.ok());
  return std::move(client).value();
}

std::unique_ptr<SyncClient> RendezvousFixture::Agent(
    const std::string& token) const {
  return Client(AgentOptions(token));
}

std::vector<std::unique_ptr<SyncClient>> RendezvousFixture::Agents(
    int n, const std::vector<EventLog*>& logs) const {
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < n; ++i) {
    clients.push_back(Agent());
    if (static_cast<size_t>(i) < logs.size() && logs[i] != nullptr)
      clients.back()->SetEventHandler(logs[i]->Handler());
  }
  return clients;
}

std::unique_ptr<v1::Rendezvous::Stub> RendezvousFixture::Stub() const {
  return v1::Rendezvous::NewStub(
      grpc::CreateChannel(endpoint(), grpc::InsecureChannelCredentials()));
}

v1::StatusResponse RendezvousFixture::Status(const std::string& token) const {
  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  if (!token.empty()) ctx.AddMetadata("x-ddprun-token", token);
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, v1::StatusRequest(), &resp);
  REQUIRE(s.ok());
  return resp;
}

void RendezvousFixture::Shutdown(Clock::Duration grace) {
  server_->Shutdown(grace);
}

void RendezvousFixture::StartAgain() {
  server_ = std::make_unique<RendezvousServer>();
  StatusOr<int> again = server_->Start("127.0.0.1", port_, options_);
  REQUIRE(again.ok());
  REQUIRE(*again == port_);
}

std::vector<StatusOr<RendezvousResult>> JoinAll(
    std::vector<std::unique_ptr<SyncClient>>& clients, int min, int max,
    std::vector<int> nprocs, int max_restarts) {
  std::vector<std::future<StatusOr<RendezvousResult>>> futures;
  for (size_t i = 0; i < clients.size(); ++i) {
    const int nproc = i < nprocs.size() ? nprocs[i] : 2;
    futures.push_back(std::async(std::launch::async, [&, i, nproc] {
      return clients[i]->Join(AgentRequest("node" + std::to_string(i), min, max,
                                           nproc, max_restarts),
                              std::chrono::steady_clock::now() + seconds(15));
    }));
  }
  std::vector<StatusOr<RendezvousResult>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

RendezvousClient::EventHandler EventLog::Handler() {
  return [this](const RendezvousEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    cv_.notify_all();
  };
}

std::optional<RendezvousEvent> EventLog::Wait(Clock::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) {
    return std::nullopt;
  }
  return events_.front();
}

size_t EventLog::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

}  // namespace ddprun::rendezvous::testing
