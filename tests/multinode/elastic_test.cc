// Elastic behaviour of real ddprun agents on loopback (shell workers from
// data/env_worker.sh, one per node, so that only the agents' reactions are
// timed): a late joiner, kill -9 of an agent, kill -9 and restart of the
// server, worker failures and an exhausted restart budget.

#include "ddprun_catch.h"
#include "reaction_bound.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "tests/multinode/elastic_job.h"

namespace ddprun::multinode {
namespace {

TEST_CASE("multinode: a third agent joins 1:3, all restart into 3 nodes",
          "[multinode][elastic]") {
  ElasticJob job(Env{{"MN_FINISH_WS", "3"}});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {"--nnodes=1:3", "--rdzv_id=late",
                                   "--max_restarts=0",
                                   "--rdzv_conf=last_call_timeout=1"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  REQUIRE(job.WaitStarts(
      2, [](const WorkerStart& s) { return s.world_size == 2; }, 15s));
  Child& c = job.Start("c", args);
  REQUIRE(job.WaitStarts(
      3, [](const WorkerStart& s) { return s.world_size == 3; }, 15s));
  CHECK(a.Wait(15s) == 0);
  CHECK(b.Wait(15s) == 0);
  CHECK(c.Wait(15s) == 0);
  std::set<int> ranks;
  for (const WorkerStart& s : job.Starts()) {
    CHECK(s.restart_count == 0);  // membership changes spend no budget
    if (s.world_size == 3) {
      ranks.insert(s.rank);
      CHECK(s.group_world_size == 3);
    }
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
}

TEST_CASE(
    "multinode: kill -9 of one agent, the survivor restarts once the "
    "heartbeat timeout drops it",
    "[multinode][elastic]") {
  ElasticJob job(Env{{"MN_FINISH_WS", "1"}});
  REQUIRE(job.port() > 0);
  const double heartbeat_timeout_s = 3;
  std::vector<std::string> args = {"--nnodes=1:2", "--rdzv_id=loss",
                                   "--rdzv_conf=heartbeat_timeout=3"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  REQUIRE(job.WaitStarts(
      2, [](const WorkerStart& s) { return s.world_size == 2; }, 15s));
  const double killed_at = WallNow();
  b.Kill(SIGKILL);
  REQUIRE(job.WaitStarts(
      1,
      [](const WorkerStart& s) { return s.node == "a" && s.world_size == 1; },
      10s));
  double restarted_at = 0;
  for (const WorkerStart& s : job.Starts()) {
    if (s.node == "a" && s.world_size == 1) restarted_at = s.wall_time;
  }
  const double seconds = restarted_at - killed_at;
  std::printf("[multinode] survivor's worker restarted %.2f s after kill -9\n",
              seconds);
  CHECK(seconds <= test_timing::ReactionBoundS(heartbeat_timeout_s));
  CHECK(a.Wait(10s) == 0);
}

TEST_CASE("multinode: kill -9 and restart of the server, the job finishes",
          "[multinode][elastic]") {
  ElasticJob job(Env{{"MN_SLEEP", "6"}});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {"--nnodes=2", "--rdzv_id=srv"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  REQUIRE(job.WaitStarts(
      2, [](const WorkerStart& s) { return s.world_size == 2; }, 15s));
  job.RestartServer();
  REQUIRE(job.server().port() > 0);
  CHECK(a.Wait(20s) == 0);
  CHECK(b.Wait(20s) == 0);
  // The healthy workers were never restarted.
  CHECK(job.Starts().size() == 2);
}

TEST_CASE("multinode: a worker failure restarts the job on both nodes",
          "[multinode][elastic]") {
  ElasticJob job(Env{{"MN_FAIL", "first"}, {"MN_SLEEP", "1"}});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {"--nnodes=2", "--rdzv_id=fail",
                                   "--max_restarts=1"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  CHECK(a.Wait(25s) == 0);
  CHECK(b.Wait(25s) == 0);
  std::map<std::string, std::set<int>> attempts;
  for (const WorkerStart& s : job.Starts()) {
    attempts[s.node].insert(s.restart_count);
  }
  CHECK(attempts["a"] == std::set<int>{0, 1});
  CHECK(attempts["b"] == std::set<int>{0, 1});
}

TEST_CASE("multinode: an exhausted restart budget fails both nodes",
          "[multinode][elastic]") {
  ElasticJob job(Env{{"MN_FAIL", "always"}});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {"--nnodes=2", "--rdzv_id=budget",
                                   "--max_restarts=1"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  const int code_a = a.Wait(25s), code_b = b.Wait(25s);
  CHECK(code_a != 0);
  CHECK(code_a != -1);
  CHECK(code_b != 0);
  CHECK(code_b != -1);
  std::set<int> attempts;
  for (const WorkerStart& s : job.Starts()) attempts.insert(s.restart_count);
  CHECK(attempts == std::set<int>{0, 1});
}

TEST_CASE(
    "multinode: a usage error (exit 2) on the first attempt fails the whole "
    "job at once",
    "[multinode][elastic]") {
  ElasticJob job(Env{{"MN_FAIL", "first"}, {"MN_FAIL_CODE", "2"}});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {"--nnodes=2", "--rdzv_id=usage",
                                   "--max_restarts=3"};
  Child& a = job.Start("a", args);
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  const int code_a = a.Wait(20s), code_b = b.Wait(20s);
  CHECK(code_a == 1);
  CHECK(code_b == 1);
  // One attempt on each node, no restart budget spent.
  CHECK(job.Starts().size() == 2);
  for (const WorkerStart& s : job.Starts()) CHECK(s.restart_count == 0);
  const std::string failed_node = job.Outputs();
  CHECK(failed_node.find("not retried: local_rank 0 exited with code 2") !=
        std::string::npos);
  CHECK(failed_node.find("reported a failure that is not retried") !=
        std::string::npos);
}

TEST_CASE(
    "multinode: a server killed at the end of a job costs a finished node "
    "connection_lost_timeout, with a clear message",
    "[multinode][elastic]") {
  ElasticJob job(Env{});
  REQUIRE(job.port() > 0);
  std::vector<std::string> args = {
      "--nnodes=2", "--rdzv_id=barrier",
      "--rdzv_conf=connection_lost_timeout=3,heartbeat_timeout=10"};
  // DEBUG: a logs "worker group succeeded" as it enters the exit barrier.
  Child& a =
      job.Start("a", args, {{"MN_SLEEP", "0"}, {"DDPRUN_LOG_LEVEL", "DEBUG"}});
  Child& b = job.Start("b", args, {{"MN_SLEEP", "60"}});
  INFO(job.Outputs());
  REQUIRE(job.WaitStarts(
      2, [](const WorkerStart& s) { return s.world_size == 2; }, 15s));
  REQUIRE(WaitUntil(
      [&] {
        return a.Stderr().find("worker group succeeded") != std::string::npos;
      },
      15s));
  const auto killed = SteadyClock::now();
  job.server().child().Kill(SIGKILL);
  // Before: a waited the whole exit barrier (300 s), silently.
  CHECK(a.Wait(20s) == 0);
  const double took =
      std::chrono::duration<double>(SteadyClock::now() - killed).count();
  CHECK(took < 15.0);
  const std::string err = a.Stderr();
  CHECK(err.find("not reachable for 5 s") == std::string::npos);  // 3 s bound
  CHECK(err.find("unreachable for 3 s") != std::string::npos);
  CHECK(err.find("this node's workers succeeded") != std::string::npos);
  CHECK(b.Wait(20s) == 1);  // b lost the server with its workers running
}

}  // namespace
}  // namespace ddprun::multinode
