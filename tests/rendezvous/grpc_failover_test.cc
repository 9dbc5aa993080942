// Cross-host failover of an embedded rendezvous, the real thing on
// loopback: the "hosting agent's" server on 127.0.0.1, a standby on
// 127.0.0.2 (another address of this machine stands for another host).
// The server names the successor in its heartbeat replies; when it is
// gone, the successor's client starts the standby server and every client
// moves there and re-registers, calls in flight included.
#include "ddprun_catch.h"

#include <atomic>
#include <future>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/net.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/options/rendezvous_options.h"
#include "rendezvous/server/rendezvous_server.h"
#include "tests/rendezvous/rendezvous_fixture.h"
#include "tests/support/process.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::RendezvousFixture;
using testing::SyncClient;
using Steady = std::chrono::steady_clock;

constexpr const char* kStandbyHost = "127.0.0.2";

ServerOptions Hosted(const std::string& own_host) {
  ServerOptions o;
  o.failover = true;
  o.own_hosts = {own_host};
  return o;
}

// A test agent of `rdzv` (RendezvousFixture::AgentOptions) with a 300 ms
// last call.
GrpcClientOptions ClientOptions(const RendezvousFixture& rdzv) {
  GrpcClientOptions o = rdzv.AgentOptions();
  o.rendezvous.last_call_timeout = milliseconds(300);
  return o;
}

// Node `node` of job "job", 2 nodes of one rank each.
JoinRequest Request(const std::string& node) {
  return testing::AgentRequest(node, 2, 2, /*nproc=*/1);
}

// One Heartbeat of an observer that is no node of the job.
v1::HeartbeatResponse Observe(const RendezvousFixture& rdzv) {
  auto stub = rdzv.Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  v1::HeartbeatRequest req;
  req.set_rdzv_id("job");
  v1::JobConfig* c = req.mutable_config();
  c->set_min_nodes(2);
  c->set_max_nodes(2);
  c->set_max_restarts(1);
  v1::NodeInfo* n = req.mutable_node();
  n->set_node_id("observer");
  n->set_instance(7);
  n->set_local_world_size(1);
  n->set_addr("127.0.0.1");
  n->set_master_port(1);
  v1::HeartbeatResponse resp;
  grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
  REQUIRE(s.ok());
  return resp;
}

v1::StatusResponse ServerStatus(const std::string& endpoint) {
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(2));
  v1::StatusResponse resp;
  (void)stub->Status(&ctx, v1::StatusRequest(), &resp);
  return resp;
}

TEST_CASE(
    "GrpcFailover: the successor hosts at its standby and every client moves "
    "there, a call in flight included",
    "[rendezvous][grpc][failover]") {
  RendezvousFixture primary(Hosted("127.0.0.1"));
  StatusOr<int> standby_port = FreePort(kStandbyHost);
  REQUIRE(standby_port.ok());
  const std::string standby =
      std::string(kStandbyHost) + ":" + std::to_string(*standby_port);

  // node0 stands by on the hosting host (never the successor); node1 on
  // "another host", and hosts there when asked.
  GrpcClientOptions o0 = ClientOptions(primary);
  o0.standby_endpoint = primary.endpoint();
  GrpcClientOptions o1 = ClientOptions(primary);
  o1.standby_endpoint = standby;
  RendezvousServer successor;
  std::atomic<int> hosted{0};
  o1.host_standby = [&] {
    ++hosted;
    return successor.Start(kStandbyHost, *standby_port, Hosted(kStandbyHost))
        .ok();
  };
  auto c0 = RendezvousFixture::Client(o0);
  auto c1 = RendezvousFixture::Client(o1);
  auto j0 = std::async(std::launch::async, [&] {
    return c0->Join(Request("node0"), Steady::now() + seconds(15));
  });
  auto r1 = c1->Join(Request("node1"), Steady::now() + seconds(15));
  auto r0 = j0.get();
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());

  // Every heartbeat reply names node1's standby.
  v1::HeartbeatResponse seen = Observe(primary);
  CHECK(seen.failover());
  CHECK(seen.successor_endpoint() == standby);
  CHECK(seen.successor_node_id() == "node1");
  // The nodes heard it too: from their own heartbeats (every 200 ms here),
  // which show it nowhere; a fixed pause of three of them.
  std::this_thread::sleep_for(milliseconds(600));

  // node0 waits in the exit barrier on the primary when it goes away: its
  // call is retried and must follow the move.
  auto barrier0 = std::async(std::launch::async, [&] {
    return c0->ReportSuccess(r0->round, seconds(20));
  });
  // The barrier call is on its way (nothing shows it parked before the
  // primary goes; a parked or a retried call must both follow the move).
  std::this_thread::sleep_for(milliseconds(300));
  const auto gone = Steady::now();
  primary.Shutdown(milliseconds(0));  // all its state lost

  // Both nodes re-register their running round with the successor.
  v1::StatusResponse status;
  ddprun::testing::WaitUntil(
      [&] {
        status = ServerStatus(standby);
        return status.jobs_size() == 1 && status.jobs(0).nodes_size() == 2;
      },
      seconds(10), milliseconds(100));
  INFO("moved after "
       << std::chrono::duration<double>(Steady::now() - gone).count() << " s");
  REQUIRE(status.jobs_size() == 1);
  CHECK(status.jobs(0).nodes_size() == 2);
  CHECK(status.jobs(0).round() == r0->round);
  CHECK(hosted.load() == 1);
  // And the job ends well there: node0's barrier call (in flight across
  // the move) and node1's meet on the successor.
  CHECK(c1->ReportSuccess(r1->round, seconds(10)).ok());
  CHECK(barrier0.get().ok());
  c0.reset();
  c1.reset();
  successor.Shutdown(milliseconds(0));
}

TEST_CASE("GrpcFailover: no successor when every standby is on the host",
          "[rendezvous][grpc][failover]") {
  RendezvousFixture rdzv(Hosted("127.0.0.1"));
  GrpcClientOptions o = ClientOptions(rdzv);
  o.standby_endpoint = rdzv.endpoint();
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(rdzv.Client(o));
  auto j0 = std::async(std::launch::async, [&] {
    return clients[0]->Join(Request("node0"), Steady::now() + seconds(15));
  });
  REQUIRE(clients[1]->Join(Request("node1"), Steady::now() + seconds(15)).ok());
  REQUIRE(j0.get().ok());
  v1::HeartbeatResponse seen = Observe(rdzv);
  CHECK(seen.failover());
  CHECK(seen.successor_endpoint().empty());
  CHECK(seen.successor_node_id().empty());
}

TEST_CASE("ParseRendezvousOptions: standby_port is a TCP port",
          "[rendezvous][failover]") {
  auto parse = [](const std::string& value) {
    return ParseRendezvousOptions("--rdzv_conf", {{"standby_port", value}},
                                  std::nullopt, nullptr);
  };
  auto ok = parse("29500");
  REQUIRE(ok.ok());
  CHECK(ok->standby_port == 29500);
  CHECK_FALSE(ParseRendezvousOptions("--rdzv_conf", {}, std::nullopt, nullptr)
                  ->standby_port.has_value());
  for (const char* bad : {"0", "65536", "-1", "x", " 80", "80x", ""}) {
    auto refused = parse(bad);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(refused.status().message(),
               Catch::Contains("standby_port=" + std::string(bad) +
                               ": expected a TCP port in 1..65535"));
  }
}

}  // namespace
}  // namespace ddprun::rendezvous
