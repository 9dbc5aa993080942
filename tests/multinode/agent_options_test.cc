// Rendezvous options of real ddprun agents on loopback, seen where a user
// sees them: --local_addr in the workers' MASTER_ADDR, rdzv_conf
// heartbeat_interval in the server's heartbeat ages, --exit_barrier_timeout
// in how long a finished node waits, join_timeout's message on every agent,
// and a spare's exit when the job succeeds without it.

#include "ddprun_catch.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/multinode/elastic_job.h"

namespace ddprun::multinode {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("multinode: --local_addr is the MASTER_ADDR every worker sees",
          "[multinode][options]") {
  ElasticJob job(Env{{"MN_SLEEP", "0"}});
  REQUIRE(job.port() > 0);
  // Group rank 0 announces 127.0.0.2 (loopback, but not the address the
  // route to the server would pick: 127.0.0.1).
  Child& a = job.Start("a", {"--nnodes=2", "--rdzv_id=addr", "--node_rank=0",
                             "--local_addr=127.0.0.2"});
  Child& b = job.Start("b", {"--nnodes=2", "--rdzv_id=addr", "--node_rank=1"});
  INFO(job.Outputs());
  CHECK(a.Wait(20s) == 0);
  CHECK(b.Wait(20s) == 0);
  const std::vector<WorkerStart> starts = job.Starts();
  REQUIRE(starts.size() == 2);
  for (const WorkerStart& s : starts) {
    INFO("node " << s.node);
    CHECK(s.master_addr == "127.0.0.2");
  }
}

// The largest heartbeat age the server reports for each node of `rdzv_id`,
// sampled with `ddprun-rendezvous --status --json` for `window`.
std::map<std::string, int64_t> MaxHeartbeatAges(
    const ElasticJob& job, const std::string& rdzv_id,
    std::chrono::milliseconds window) {
  std::map<std::string, int64_t> max_age;
  const auto end = SteadyClock::now() + window;
  while (SteadyClock::now() < end) {
    const std::string text = job.StatusJson(rdzv_id);
    if (text.empty()) continue;
    const nlohmann::json status = nlohmann::json::parse(text);
    for (const auto& node : status["jobs"][0]["nodes"]) {
      // proto3 JSON writes int64 as a string.
      const auto& age = node["heartbeat_age_ms"];
      const int64_t ms = age.is_string() ? std::stoll(age.get<std::string>())
                                         : age.get<int64_t>();
      int64_t& m = max_age[node["node_id"].get<std::string>()];
      m = std::max(m, ms);
    }
  }
  return max_age;
}

TEST_CASE("multinode: rdzv_conf heartbeat_interval sets the heartbeat period",
          "[multinode][options]") {
  ElasticJob job(Env{{"MN_SLEEP", "60"}});
  REQUIRE(job.port() > 0);
  // Each agent heartbeats at its own interval (default 1 s).
  Child& a = job.Start(
      "a", {"--nnodes=2", "--rdzv_id=hb",
            "--rdzv_conf=heartbeat_interval=0.2,heartbeat_timeout=8"});
  Child& b = job.Start(
      "b", {"--nnodes=2", "--rdzv_id=hb",
            "--rdzv_conf=heartbeat_interval=2.5,heartbeat_timeout=8"});
  INFO(job.Outputs());
  REQUIRE(job.WaitStarts(
      2, [](const WorkerStart& s) { return s.world_size == 2; }, 20s));
  // Node ids are host:pid:random; tell them apart by the agent's pid.
  const std::map<std::string, int64_t> ages = MaxHeartbeatAges(job, "hb", 4s);
  int64_t fast = -1, slow = -1;
  for (const auto& [node_id, ms] : ages) {
    if (Contains(node_id, ":" + std::to_string(a.pid()) + ":")) fast = ms;
    if (Contains(node_id, ":" + std::to_string(b.pid()) + ":")) slow = ms;
  }
  INFO("max heartbeat age: a (0.2 s) " << fast << " ms, b (2.5 s) " << slow
                                       << " ms");
  REQUIRE(fast >= 0);
  REQUIRE(slow >= 0);
  CHECK(fast < 900);   // the default 1 s would reach ~1000 ms
  CHECK(slow > 1500);  // the default 1 s would stay below ~1000 ms
  CHECK(a.Running());  // 2.5 s < heartbeat_timeout: nobody was dropped
  CHECK(b.Running());
  CHECK(job.Starts().size() == 2);
}

TEST_CASE("multinode: --exit_barrier_timeout bounds a finished node's wait",
          "[multinode][options]") {
  ElasticJob job(Env{});
  REQUIRE(job.port() > 0);
  // "fast" finishes at once and waits in the exit barrier for "slow",
  // which runs for a minute: at most 2 s (the default is 300 s).
  Child& fast = job.Start(
      "fast", {"--nnodes=2", "--rdzv_id=barrier", "--exit_barrier_timeout=2"},
      Env{{"MN_SLEEP", "0"}});
  Child& slow = job.Start("slow", {"--nnodes=2", "--rdzv_id=barrier"},
                          Env{{"MN_SLEEP", "60"}});
  INFO(job.Outputs());
  REQUIRE(job.WaitStarts(
      2, [](const WorkerStart& s) { return s.world_size == 2; }, 20s));
  CHECK(fast.Wait(10s) == 0);  // its own workers succeeded
  double worker_started = 0;
  for (const WorkerStart& s : job.Starts()) {
    if (s.node == "fast") worker_started = s.wall_time;
  }
  // From the start of fast's worker (which exits at once) to fast's exit.
  const double waited = WallNow() - worker_started;
  CHECK(waited > 1.8);
  CHECK(waited < 6.0);
  CHECK(Contains(fast.Stderr(), "not every node finished within 2 s"));
  CHECK(slow.Running());
}

TEST_CASE("multinode: join_timeout gives every agent the server's reason",
          "[multinode][options]") {
  ElasticJob job(Env{});
  REQUIRE(job.port() > 0);
  // Two of the three nodes the job needs.
  std::vector<std::string> args = {"--nnodes=3:3", "--rdzv_id=short",
                                   "--rdzv_conf=join_timeout=2"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  for (Child* agent : {&a, &b}) {
    const int code = agent->Wait(20s);
    CHECK(code != 0);
    CHECK(code != -1);
    CHECK(Contains(agent->Stderr(),
                   "rendezvous 'short' did not reach min_nodes=3 within "
                   "join_timeout 2.0 s"));
  }
  CHECK(job.Starts().empty());
}

TEST_CASE("multinode: a spare ends with 0 when the job succeeds without it",
          "[multinode][options]") {
  ElasticJob job(Env{{"MN_SLEEP", "5"}});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {"--nnodes=1:1", "--rdzv_id=spare"};
  Child& a = job.Start("a", args);
  REQUIRE(job.WaitStarts(
      1, [](const WorkerStart& s) { return s.node == "a"; }, 20s));
  // The round is full: the second agent waits as a spare.
  Child& spare = job.Start("spare", args);
  INFO(job.Outputs());
  REQUIRE(WaitUntil(
      [&] { return Contains(job.StatusJson("spare"), "STATE_WAITING"); }, 4s));
  CHECK(a.Wait(15s) == 0);
  CHECK(spare.Wait(10s) == 0);
  CHECK(Contains(spare.Stderr(),
                 "job spare finished successfully while this node was "
                 "waiting as a spare"));
  const std::vector<WorkerStart> starts = job.Starts();
  CHECK(std::none_of(starts.begin(), starts.end(),
                     [](const WorkerStart& s) { return s.node == "spare"; }));
}

}  // namespace
}  // namespace ddprun::multinode
