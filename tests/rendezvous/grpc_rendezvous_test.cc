// The real thing on loopback: RendezvousServer on 127.0.0.1:0 and
// GrpcRendezvousClient agents, each on a loop thread of its own, called
// through SyncClient (tests/rendezvous/sync_client.h) from test threads.
#include "ddprun_catch.h"

#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/options/rendezvous_options.h"
#include "rendezvous/server/rendezvous_server.h"
#include "tests/rendezvous/sync_client.h"
#include "tests/support/process.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::SyncClient;
using Steady = std::chrono::steady_clock;

std::unique_ptr<SyncClient> MakeClient(int port,
                                       const std::string& token = "") {
  auto c = SyncClient::Grpc(testing::LoopbackClientOptions(port, token));
  REQUIRE(c.ok());
  return std::move(c).value();
}

JoinRequest Request(const std::string& node, int min, int max, int nproc = 2,
                    int max_restarts = 1) {
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

// Records events from a client (delivered on its loop thread).
class EventLog {
 public:
  RendezvousClient::EventHandler Handler() {
    return [this](const RendezvousEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e);
      cv_.notify_all();
    };
  }
  // Waits until an event arrives or `timeout` passes.
  std::optional<RendezvousEvent> Wait(Clock::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) {
      return std::nullopt;
    }
    return events_.front();
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RendezvousEvent> events_;
};

Clock::TimePoint In(Clock::Duration d) { return Steady::now() + d; }

// Joins `clients` concurrently (one thread each) and returns the results.
std::vector<StatusOr<RendezvousResult>> JoinAll(
    std::vector<std::unique_ptr<SyncClient>>& clients, int min, int max,
    std::vector<int> nprocs = {}, int max_restarts = 1) {
  std::vector<std::future<StatusOr<RendezvousResult>>> futures;
  for (size_t i = 0; i < clients.size(); ++i) {
    const int nproc = i < nprocs.size() ? nprocs[i] : 2;
    futures.push_back(std::async(std::launch::async, [&, i, nproc] {
      return clients[i]->Join(
          Request("node" + std::to_string(i), min, max, nproc, max_restarts),
          In(seconds(15)));
    }));
  }
  std::vector<StatusOr<RendezvousResult>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

v1::StatusResponse ServerStatus(int port, const std::string& token = "") {
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  if (!token.empty()) ctx.AddMetadata("x-ddprun-token", token);
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, v1::StatusRequest(), &resp);
  REQUIRE(s.ok());
  return resp;
}

TEST_CASE("GrpcRendezvous: four agents complete a round with consistent ranks",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  REQUIRE(*port > 0);
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(MakeClient(*port));
  auto results = JoinAll(clients, 4, 4, {1, 2, 3, 4});
  std::set<int> group_ranks;
  std::set<int> ranks;
  for (size_t i = 0; i < results.size(); ++i) {
    REQUIRE(results[i].ok());
    const RendezvousResult& r = *results[i];
    group_ranks.insert(r.group_rank);
    for (size_t l = 0; l < i + 1; ++l) ranks.insert(r.rank_offset + l);
    CHECK(r.group_world_size == 4);
    CHECK(r.world_size == 10);
    CHECK(r.round == 1);
    CHECK(r.restart_count == 0);
    CHECK(r.master_addr == "127.0.0.1");
    CHECK(r.master_port == results[0]->master_port);
    CHECK(r.master_port > 0);
  }
  CHECK(group_ranks == std::set<int>{0, 1, 2, 3});
  CHECK(ranks.size() == 10);  // global ranks 0..9, each exactly once
  CHECK(*ranks.rbegin() == 9);
}

TEST_CASE("GrpcRendezvous: a wrong token is refused and changes nothing",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  ServerOptions options;
  options.token = "s3cret";
  auto port = server.Start("127.0.0.1", 0, options);
  REQUIRE(port.ok());
  auto bad = MakeClient(*port, "guess");
  auto r = bad->Join(Request("intruder", 1, 1), In(seconds(5)));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(r.status().message(), Catch::Contains("token"));
  CHECK(ServerStatus(*port, "s3cret").jobs_size() == 0);
  auto good = MakeClient(*port, "s3cret");
  auto ok = good->Join(Request("friend", 1, 1), In(seconds(5)));
  REQUIRE(ok.ok());
  CHECK(ServerStatus(*port, "s3cret").jobs_size() == 1);
}

TEST_CASE("GrpcRendezvous: a silent agent is dropped and the others re-join",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(MakeClient(*port));
  EventLog survivor0, survivor1;
  clients[0]->SetEventHandler(survivor0.Handler());
  clients[1]->SetEventHandler(survivor1.Handler());
  auto results = JoinAll(clients, 2, 3);
  for (auto& r : results) REQUIRE(r.ok());
  // Real time on purpose: nothing may happen while the job is healthy.
  std::this_thread::sleep_for(milliseconds(600));
  CHECK(survivor0.size() == 0);

  const auto killed = Steady::now();
  clients[2].reset();  // heartbeats stop, no Leave: like kill -9
  // heartbeat_timeout 2 s + one 200 ms heartbeat + margin.
  auto e0 = survivor0.Wait(milliseconds(3500));
  auto e1 = survivor1.Wait(milliseconds(3500));
  REQUIRE(e0.has_value());
  REQUIRE(e1.has_value());
  CHECK(Steady::now() - killed < milliseconds(3500));
  CHECK(e0->type == RendezvousEventType::kMembershipChanged);
  CHECK_THAT(e0->reason,
             Catch::Contains("node2") && Catch::Contains("no heartbeat"));

  clients.pop_back();
  auto again = JoinAll(clients, 2, 3);
  for (auto& r : again) {
    REQUIRE(r.ok());
    CHECK(r->round == 2);
    CHECK(r->group_world_size == 2);
    CHECK(r->restart_count == 0);  // membership change spends no budget
  }
}

TEST_CASE("GrpcRendezvous: a third agent joining 1:3 scales the job up",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(MakeClient(*port));
  EventLog events0, events1;
  clients[0]->SetEventHandler(events0.Handler());
  clients[1]->SetEventHandler(events1.Handler());
  // min 1: the round starts after last_call (500 ms) with two nodes.
  auto first = JoinAll(clients, 1, 3);
  for (auto& r : first) {
    REQUIRE(r.ok());
    CHECK(r->group_world_size == 2);
  }
  auto late = MakeClient(*port);
  auto late_join = std::async(std::launch::async, [&] {
    return late->Join(Request("node2", 1, 3), In(seconds(15)));
  });
  auto e0 = events0.Wait(seconds(3));
  auto e1 = events1.Wait(seconds(3));
  REQUIRE(e0.has_value());
  REQUIRE(e1.has_value());
  CHECK(e0->type == RendezvousEventType::kMembershipChanged);
  CHECK_THAT(e0->reason, Catch::Contains("node2"));
  auto again = JoinAll(clients, 1, 3);
  auto third = late_join.get();
  REQUIRE(third.ok());
  CHECK(third->group_world_size == 3);
  CHECK(third->group_rank == 2);
  for (size_t i = 0; i < again.size(); ++i) {
    REQUIRE(again[i].ok());
    CHECK(again[i]->group_world_size == 3);
    CHECK(again[i]->group_rank == first[i]->group_rank);  // ranks kept
    CHECK(again[i]->restart_count == 0);
    CHECK(again[i]->world_size == 6);
  }
}

TEST_CASE("GrpcRendezvous: Leave during a parked Join cancels it",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  auto client = MakeClient(*port);
  auto join = std::async(std::launch::async, [&] {
    return client->Join(Request("quitter", 2, 2), In(seconds(15)));
  });
  // Wait until the server has the node parked.
  ddprun::testing::WaitUntil(
      [&] {
        auto st = ServerStatus(*port);
        return st.jobs_size() == 1 && st.jobs(0).nodes_size() == 1;
      },
      seconds(5), milliseconds(20));
  const auto t0 = Steady::now();
  client->Leave();
  auto r = join.get();
  CHECK(Steady::now() - t0 < seconds(3));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kCancelled);
  // No ghost participant left behind (the empty job may already be gone).
  auto st = ServerStatus(*port);
  for (const auto& job : st.jobs()) CHECK(job.nodes_size() == 0);
}

TEST_CASE(
    "GrpcRendezvous: workers failing because a node died spend no "
    "budget",
    "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(MakeClient(*port));
  // max_restarts 0: any spent restart would fail the job.
  auto first = JoinAll(clients, 2, 3, {}, /*max_restarts=*/0);
  for (auto& r : first) REQUIRE(r.ok());
  clients[2].reset();  // node2 dies...
  // ...and node0's collectives fail right away.
  auto restart =
      clients[0]->ReportFailure(first[0]->round, "gloo: reset", true);
  REQUIRE(restart.ok());
  CHECK(*restart);  // the node loss explains it: the job goes on
  clients.pop_back();
  for (auto& r : JoinAll(clients, 2, 3, {}, /*max_restarts=*/0)) {
    REQUIRE(r.ok());
    CHECK(r->group_world_size == 2);
    CHECK(r->restart_count == 0);
  }
}

TEST_CASE(
    "GrpcRendezvous: worker failure restarts every node with one "
    "global count",
    "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(MakeClient(*port));
  EventLog other;
  clients[1]->SetEventHandler(other.Handler());
  auto first = JoinAll(clients, 2, 2);
  REQUIRE(first[0].ok());
  auto restart =
      clients[0]->ReportFailure(first[0]->round, "rank 0 exit 1", true);
  REQUIRE(restart.ok());
  CHECK(*restart);
  auto e = other.Wait(seconds(3));
  REQUIRE(e.has_value());
  CHECK(e->type == RendezvousEventType::kRestartRequested);
  CHECK_THAT(e->reason, Catch::Contains("rank 0 exit 1"));
  auto second = JoinAll(clients, 2, 2);
  for (auto& r : second) {
    REQUIRE(r.ok());
    CHECK(r->restart_count == 1);
  }
  // max_restarts=1 is spent: the next failure fails the job everywhere.
  auto exhausted = clients[1]->ReportFailure(second[1]->round, "again", true);
  REQUIRE(exhausted.ok());
  CHECK_FALSE(*exhausted);
  auto late = clients[0]->Join(Request("node0", 2, 2), In(seconds(3)));
  CHECK(late.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("GrpcRendezvous: exit barrier waits for all and times out",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(MakeClient(*port));
  auto results = JoinAll(clients, 2, 2);
  REQUIRE(results[0].ok());
  const int64_t round = results[0]->round;
  // Only node0 finishes: its barrier times out, bounded.
  const auto t0 = Steady::now();
  Status timed_out = clients[0]->ReportSuccess(round, milliseconds(500));
  CHECK(timed_out.code() == StatusCode::kDeadlineExceeded);
  CHECK(Steady::now() - t0 < seconds(3));
  auto pending = std::async(std::launch::async, [&] {
    return clients[0]->ReportSuccess(round, seconds(10));
  });
  std::this_thread::sleep_for(milliseconds(200));
  REQUIRE(clients[1]->ReportSuccess(round, seconds(10)).ok());
  CHECK(pending.get().ok());
  auto status = ServerStatus(*port);
  REQUIRE(status.jobs_size() == 1);
  CHECK(status.jobs(0).state() == v1::JobStatus::STATE_SUCCEEDED);
}

TEST_CASE("GrpcRendezvous: join_timeout fails the job with a clear error",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  GrpcClientOptions o;
  o.endpoint = "127.0.0.1:" + std::to_string(*port);
  o.rendezvous.join_timeout = milliseconds(700);
  auto client = SyncClient::Grpc(o);
  REQUIRE(client.ok());
  auto r = (*client)->Join(Request("lonely", 2, 2), In(seconds(10)));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(r.status().message(),
             Catch::Contains("did not reach min_nodes=2"));
}

TEST_CASE("GrpcRendezvous: a restarted server keeps a healthy job running",
          "[rendezvous][grpc]") {
  auto server = std::make_unique<RendezvousServer>();
  auto port = server->Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(MakeClient(*port));
  EventLog events0, events1;
  clients[0]->SetEventHandler(events0.Handler());
  clients[1]->SetEventHandler(events1.Handler());
  auto results = JoinAll(clients, 2, 2);
  for (auto& r : results) REQUIRE(r.ok());

  server->Shutdown(milliseconds(100));  // all state lost
  // The server stays away for a while on purpose (an outage, not a
  // condition).
  std::this_thread::sleep_for(milliseconds(500));
  server = std::make_unique<RendezvousServer>();
  auto again = server->Start("127.0.0.1", *port, ServerOptions());
  REQUIRE(again.ok());
  REQUIRE(*again == *port);

  // The agents re-register their round through heartbeats.
  v1::StatusResponse status;
  ddprun::testing::WaitUntil(
      [&] {
        status = ServerStatus(*port);
        return status.jobs_size() == 1 && status.jobs(0).nodes_size() == 2;
      },
      seconds(5), milliseconds(100));
  REQUIRE(status.jobs_size() == 1);
  CHECK(status.jobs(0).state() == v1::JobStatus::STATE_RUNNING);
  CHECK(status.jobs(0).round() == 1);
  CHECK(status.jobs(0).nodes_size() == 2);
  // Real time on purpose: longer than heartbeat_timeout, nobody is dropped.
  std::this_thread::sleep_for(milliseconds(2500));
  CHECK(events0.size() == 0);                       // nobody was told to stop
  CHECK(events1.size() == 0);
  // And the rebuilt job still works: a clean exit barrier.
  auto done = std::async(std::launch::async, [&] {
    return clients[0]->ReportSuccess(results[0]->round, seconds(5));
  });
  CHECK(clients[1]->ReportSuccess(results[1]->round, seconds(5)).ok());
  CHECK(done.get().ok());
}

TEST_CASE("GrpcRendezvous: a Join parked across a server restart completes",
          "[rendezvous][grpc]") {
  auto server = std::make_unique<RendezvousServer>();
  auto port = server->Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  auto early = MakeClient(*port);
  auto early_join = std::async(std::launch::async, [&] {
    return early->Join(Request("early", 2, 2), In(seconds(15)));
  });
  // Parked on server 1.
  REQUIRE(ddprun::testing::WaitUntil(
      [&] {
        auto st = ServerStatus(*port);
        return st.jobs_size() == 1 && st.jobs(0).nodes_size() == 1;
      },
      seconds(5), milliseconds(20)));
  server->Shutdown(milliseconds(100));
  server = std::make_unique<RendezvousServer>();
  REQUIRE(server->Start("127.0.0.1", *port, ServerOptions()).ok());
  auto late = MakeClient(*port);
  auto late_result = late->Join(Request("late", 2, 2), In(seconds(15)));
  auto early_result = early_join.get();
  REQUIRE(early_result.ok());
  REQUIRE(late_result.ok());
  CHECK(early_result->group_world_size == 2);
  CHECK(early_result->master_port == late_result->master_port);
  CHECK(early_result->group_rank != late_result->group_rank);
}

TEST_CASE("GrpcRendezvous: oversized and malformed requests are refused",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(*port),
                          grpc::InsecureChannelCredentials()));
  v1::JoinRequest big;
  big.set_rdzv_id("job");
  big.mutable_config()->set_min_nodes(1);
  big.mutable_config()->set_max_nodes(1);
  big.mutable_node()->set_node_id(std::string(100 * 1024, 'x'));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::JoinResponse resp;
    grpc::Status s = stub->Join(&ctx, big, &resp);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  big.mutable_node()->set_node_id("n");  // and no instance, no addr
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::JoinResponse resp;
    grpc::Status s = stub->Join(&ctx, big, &resp);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::StatusRequest req;
    req.set_rdzv_id("nope");
    v1::StatusResponse resp;
    grpc::Status s = stub->Status(&ctx, req, &resp);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK_THAT(s.error_message(), Catch::Contains("unknown rendezvous 'nope'"));
  }
  CHECK(ServerStatus(*port).jobs_size() == 0);
}

TEST_CASE("GrpcRendezvous: ddprun-rendezvous --status prints the live job",
          "[rendezvous][grpc]") {
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  std::vector<std::unique_ptr<SyncClient>> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(MakeClient(*port));
  for (auto& r : JoinAll(clients, 2, 2)) REQUIRE(r.ok());

  auto run = [](const std::string& args, int* rc) {
    const std::string cmd =
        std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    *rc = WEXITSTATUS(pclose(p));
    return out;
  };
  const std::string endpoint = "127.0.0.1:" + std::to_string(*port);
  int rc = -1;
  std::string table = run("--status " + endpoint, &rc);
  CHECK(rc == 0);
  CHECK_THAT(table, Catch::Contains("job job: running, round 1") &&
                        Catch::Contains("node0") && Catch::Contains("node1") &&
                        Catch::Contains("HEARTBEAT"));
  std::string json = run("--status " + endpoint + " --rdzv_id job --json", &rc);
  CHECK(rc == 0);
  CHECK_THAT(json, Catch::Contains("\"rdzv_id\": \"job\"") &&
                       Catch::Contains("\"heartbeat_age_ms\"") &&
                       Catch::Contains("\"group_rank\": 1"));
  std::string missing = run("--status " + endpoint + " --rdzv_id other", &rc);
  CHECK(rc == 1);
  CHECK_THAT(missing, Catch::Contains("unknown rendezvous 'other'"));
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

// --rdzv_conf as the agent reads it, once (RendezvousOptions).
StatusOr<RendezvousOptions> Parse(const RdzvConf& conf) {
  return ParseRendezvousOptions("rdzv_conf", conf, std::nullopt, nullptr);
}

TEST_CASE("ParseRendezvousOptions: timeouts in seconds, token file, bad values",
          "[rendezvous]") {
  StatusOr<RendezvousOptions> o = Parse({{"heartbeat_timeout", "1.5"},
                                         {"join_timeout", "30"},
                                         {"is_host", "true"}});
  REQUIRE(o.ok());
  CHECK(o->heartbeat_timeout == std::chrono::milliseconds(1500));
  CHECK(o->join_timeout == std::chrono::seconds(30));
  CHECK(o->heartbeat_interval == std::chrono::seconds(1));  // untouched
  CHECK(o->is_host == true);
  Status bad = Parse({{"last_call_timeout", "soon"}}).status();
  CHECK(bad.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.message(), Catch::Contains("last_call_timeout=soon"));
  const std::string path = "/tmp/ddprun_token_" + std::to_string(getpid());
  {
    FILE* f = fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    fputs("abc\n", f);
    fclose(f);
  }
  // Readable by others: refused (issue 39), as ssh refuses such a key.
  REQUIRE(chmod(path.c_str(), 0640) == 0);
  Status open = Parse({{"token_file", path}}).status();
  CHECK(open.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(open.message(), Catch::Contains("token_file=" + path +
                                             ": permissions 0640 are "
                                             "too open"));
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  StatusOr<RendezvousOptions> with_file = Parse({{"token_file", path}});
  REQUIRE(with_file.ok());
  CHECK(with_file->token == "abc");
  std::remove(path.c_str());
  Status unreadable = Parse({{"tls_ca", path}}).status();
  CHECK(unreadable.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unreadable.message(), Catch::Contains("tls_ca=" + path));
  Status unknown = Parse({{"join_timout", "5"}}).status();
  CHECK(unknown.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unknown.message(), Catch::Contains("unknown key 'join_timout'"));
}

TEST_CASE("ParseRendezvousOptions: bad-host keys reach the server's job config",
          "[rendezvous][grpc]") {
  StatusOr<RendezvousOptions> parsed = Parse({{"bad_host_failures", "3"},
                                              {"bad_host_window", "120"},
                                              {"bad_host_cooldown", "30.5"}});
  REQUIRE(parsed.ok());
  CHECK(parsed->bad_host_failures == 3);
  CHECK(parsed->bad_host_window == seconds(120));
  CHECK(parsed->bad_host_cooldown == milliseconds(30500));
  Status bad = Parse({{"bad_host_failures", "-1"}}).status();
  CHECK(bad.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.message(), Catch::Contains("bad_host_failures=-1"));
  CHECK(Parse({{"bad_host_cooldown", "0"}}).status().code() ==
        StatusCode::kInvalidArgument);

  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  GrpcClientOptions o;
  o.rendezvous = *parsed;
  o.endpoint = "127.0.0.1:" + std::to_string(*port);
  auto client = SyncClient::Grpc(o);
  REQUIRE(client.ok());
  REQUIRE((*client)->Join(Request("a", 1, 1), In(seconds(5))).ok());
  const v1::JobConfig config = ServerStatus(*port).jobs(0).config();
  CHECK(config.bad_host_failures() == 3);
  CHECK(config.bad_host_window_ms() == 120000);
  CHECK(config.bad_host_cooldown_ms() == 30500);
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

TEST_CASE("ParseRendezvousOptions: DDPRUN_RDZV_TOKEN when rdzv_conf has none",
          "[rendezvous]") {
  StatusOr<RendezvousOptions> env =
      ParseRendezvousOptions("--rdzv_conf", {}, std::string("t0k"), nullptr);
  REQUIRE(env.ok());
  CHECK(env->token == "t0k");
  StatusOr<RendezvousOptions> conf = ParseRendezvousOptions(
      "--rdzv_conf", {{"token", "mine"}}, std::string("t0k"), nullptr);
  REQUIRE(conf.ok());
  CHECK(conf->token == "mine");
  Status empty =
      ParseRendezvousOptions("--rdzv_conf", {}, std::string(), nullptr)
          .status();
  CHECK(empty.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(empty.message(),
             Catch::Contains("DDPRUN_RDZV_TOKEN is set but empty"));
  std::vector<std::string> warnings;
  StatusOr<RendezvousOptions> no_effect = ParseRendezvousOptions(
      "PET_RDZV_CONF", {{"timeout", "900"}}, std::nullopt, &warnings);
  REQUIRE(no_effect.ok());
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("PET_RDZV_CONF timeout=900"));
}

}  // namespace
}  // namespace ddprun::rendezvous
