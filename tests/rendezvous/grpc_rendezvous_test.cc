// The real thing on loopback: RendezvousServer on 127.0.0.1:0 and
// GrpcRendezvousClient agents, each on a loop thread of its own, called
// from test threads (tests/rendezvous/rendezvous_fixture.h).
#include "ddprun_catch.h"

#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
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
#include "tests/rendezvous/rendezvous_fixture.h"
#include "tests/support/process.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::AgentRequest;
using testing::EventLog;
using testing::JoinAll;
using testing::RendezvousFixture;
using Steady = std::chrono::steady_clock;

Clock::TimePoint In(Clock::Duration d) { return Steady::now() + d; }

TEST_CASE("GrpcRendezvous: four agents complete a round with consistent ranks",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  auto clients = rdzv.Agents(4);
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
  ServerOptions options;
  options.token = "s3cret";
  RendezvousFixture rdzv(options);
  auto bad = rdzv.Agent("guess");
  auto r = bad->Join(AgentRequest("intruder", 1, 1), In(seconds(5)));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(r.status().message(), Catch::Contains("token"));
  CHECK(rdzv.Status("s3cret").jobs_size() == 0);
  auto good = rdzv.Agent("s3cret");
  auto ok = good->Join(AgentRequest("friend", 1, 1), In(seconds(5)));
  REQUIRE(ok.ok());
  CHECK(rdzv.Status("s3cret").jobs_size() == 1);
}

TEST_CASE("GrpcRendezvous: a silent agent is dropped and the others re-join",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  EventLog survivor0, survivor1;
  auto clients = rdzv.Agents(3, {&survivor0, &survivor1});
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

TEST_CASE(
    "GrpcRendezvous: a rank replaced on one node is announced to "
    "every node of the round by its next heartbeat, once",
    "[rendezvous][grpc][restart_scope]") {
  RendezvousFixture rdzv;
  auto clients = rdzv.Agents(2);
  auto results = JoinAll(clients, 2, 2, {}, /*max_restarts=*/3);
  for (auto& r : results) REQUIRE(r.ok());
  const int64_t round = results[0]->round;
  struct Heard {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> calls;
    size_t size() {
      std::lock_guard<std::mutex> lock(mu);
      return calls.size();
    }
  };
  std::vector<std::unique_ptr<Heard>> heard;
  for (auto& c : clients) {
    heard.push_back(std::make_unique<Heard>());
    Heard* h = heard.back().get();
    c->SetGenerationHandler([h](int64_t r, int64_t g) {
      std::lock_guard<std::mutex> lock(h->mu);
      h->calls.emplace_back(r, g);
    });
  }
  // Nothing is announced while nothing was replaced.
  std::this_thread::sleep_for(milliseconds(600));
  CHECK(heard[0]->size() == 0);
  auto answer = clients[1]->ReplaceRank(round, results[1]->rank_offset, 1,
                                        "local rank 0 killed by SIGKILL");
  REQUIRE(answer.ok());
  REQUIRE(answer->replaced);
  const auto deadline = Steady::now() + seconds(3);
  while ((heard[0]->size() == 0 || heard[1]->size() == 0) &&
         Steady::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  // Heartbeats every 200 ms here: several came since, one call each.
  std::this_thread::sleep_for(milliseconds(600));
  for (auto& h : heard) {
    std::lock_guard<std::mutex> lock(h->mu);
    CHECK(h->calls == std::vector<std::pair<int64_t, int64_t>>{
                          {round, answer->generation}});
  }
}

TEST_CASE("GrpcRendezvous: a third agent joining 1:3 scales the job up",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  EventLog events0, events1;
  auto clients = rdzv.Agents(2, {&events0, &events1});
  // min 1: the round starts after last_call (500 ms) with two nodes.
  auto first = JoinAll(clients, 1, 3);
  for (auto& r : first) {
    REQUIRE(r.ok());
    CHECK(r->group_world_size == 2);
  }
  auto late = rdzv.Agent();
  auto late_join = std::async(std::launch::async, [&] {
    return late->Join(AgentRequest("node2", 1, 3), In(seconds(15)));
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
  RendezvousFixture rdzv;
  auto client = rdzv.Agent();
  auto join = std::async(std::launch::async, [&] {
    return client->Join(AgentRequest("quitter", 2, 2), In(seconds(15)));
  });
  // Wait until the server has the node parked.
  ddprun::testing::WaitUntil(
      [&] {
        auto st = rdzv.Status();
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
  auto st = rdzv.Status();
  for (const auto& job : st.jobs()) CHECK(job.nodes_size() == 0);
}

TEST_CASE(
    "GrpcRendezvous: workers failing because a node died spend no "
    "budget",
    "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  auto clients = rdzv.Agents(3);
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
  RendezvousFixture rdzv;
  EventLog other;
  auto clients = rdzv.Agents(2, {nullptr, &other});
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
  auto late = clients[0]->Join(AgentRequest("node0", 2, 2), In(seconds(3)));
  CHECK(late.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("GrpcRendezvous: exit barrier waits for all and times out",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  auto clients = rdzv.Agents(2);
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
  auto status = rdzv.Status();
  REQUIRE(status.jobs_size() == 1);
  CHECK(status.jobs(0).state() == v1::JobStatus::STATE_SUCCEEDED);
}

TEST_CASE("GrpcRendezvous: join_timeout fails the job with a clear error",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  GrpcClientOptions o = rdzv.ClientOptions();
  o.rendezvous.join_timeout = milliseconds(700);
  auto client = rdzv.Client(o);
  auto r = client->Join(AgentRequest("lonely", 2, 2), In(seconds(10)));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(r.status().message(),
             Catch::Contains("did not reach min_nodes=2"));
}

TEST_CASE("GrpcRendezvous: a restarted server keeps a healthy job running",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  EventLog events0, events1;
  auto clients = rdzv.Agents(2, {&events0, &events1});
  auto results = JoinAll(clients, 2, 2);
  for (auto& r : results) REQUIRE(r.ok());

  rdzv.Shutdown(milliseconds(100));  // all state lost
  // The server stays away for a while on purpose (an outage, not a
  // condition).
  std::this_thread::sleep_for(milliseconds(500));
  rdzv.StartAgain();

  // The agents re-register their round through heartbeats.
  v1::StatusResponse status;
  ddprun::testing::WaitUntil(
      [&] {
        status = rdzv.Status();
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
  RendezvousFixture rdzv;
  auto early = rdzv.Agent();
  auto early_join = std::async(std::launch::async, [&] {
    return early->Join(AgentRequest("early", 2, 2), In(seconds(15)));
  });
  // Parked on server 1.
  REQUIRE(ddprun::testing::WaitUntil(
      [&] {
        auto st = rdzv.Status();
        return st.jobs_size() == 1 && st.jobs(0).nodes_size() == 1;
      },
      seconds(5), milliseconds(20)));
  rdzv.Shutdown(milliseconds(100));
  rdzv.StartAgain();
  auto late = rdzv.Agent();
  auto late_result = late->Join(AgentRequest("late", 2, 2), In(seconds(15)));
  auto early_result = early_join.get();
  REQUIRE(early_result.ok());
  REQUIRE(late_result.ok());
  CHECK(early_result->group_world_size == 2);
  CHECK(early_result->master_port == late_result->master_port);
  CHECK(early_result->group_rank != late_result->group_rank);
}

TEST_CASE("GrpcRendezvous: oversized and malformed requests are refused",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  auto stub = rdzv.Stub();
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
  CHECK(rdzv.Status().jobs_size() == 0);
}

TEST_CASE("GrpcRendezvous: ddprun-rendezvous --status prints the live job",
          "[rendezvous][grpc]") {
  RendezvousFixture rdzv;
  auto clients = rdzv.Agents(2);
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
  const std::string endpoint = rdzv.endpoint();
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

  RendezvousFixture rdzv;
  GrpcClientOptions o = rdzv.ClientOptions();
  o.rendezvous = *parsed;
  auto client = rdzv.Client(o);
  REQUIRE(client->Join(AgentRequest("a", 1, 1), In(seconds(5))).ok());
  const v1::JobConfig config = rdzv.Status().jobs(0).config();
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
