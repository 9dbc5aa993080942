// Failover of the embedded rendezvous: two agents share the rendezvous one
// of them hosts in-process (--rdzv_endpoint on their own host, the first to
// bind the port hosts it); kill -9 of the hosting agent must not end the
// job: the survivor takes over the endpoint, rebuilds the job and trains on
// while --nnodes MIN is met. Shell workers (data/env_worker.sh), so that
// only the agents' reactions are timed.

#include "ddprun_catch.h"
#include "reaction_bound.h"

#include <signal.h>

#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/multinode/elastic_job.h"

namespace ddprun::multinode {
namespace {

// Agents "a" (hosting: it starts first) and "b" on one embedded
// rendezvous, once both train together and `settle` later (by default long
// enough for b's periodic heartbeats, 1 s, to have told it that it may
// take over).
std::pair<Child*, Child*> StartHostedPair(
    ElasticJob& job, const std::vector<std::string>& args,
    std::chrono::milliseconds settle = 2s) {
  Child& a = job.Start("a", args);
  REQUIRE(WaitUntil(
      [&] { return a.Stderr().find("listening on") != std::string::npos; },
      10s));
  Child& b = job.Start("b", args);
  INFO(job.Outputs());
  REQUIRE(WaitUntil(
      [&] {
        return StartedAt(job.Starts(), "a", 2) > 0 &&
               StartedAt(job.Starts(), "b", 2) > 0;
      },
      20s));
  CHECK(b.Stderr().find("already served on this host") != std::string::npos);
  // The agents learn the successor from heartbeat answers and show it
  // nowhere: `settle` (heartbeats' time) is the only condition there is.
  std::this_thread::sleep_for(settle);
  return {&a, &b};
}

TEST_CASE(
    "multinode: kill -9 of the agent hosting the rendezvous, the survivor "
    "takes over and goes on",
    "[multinode][failover]") {
  // A worker in a world of one node finishes at once: the job then ends.
  ElasticJob job({{"MN_FINISH_WS", "1"}}, /*external_server=*/false);
  auto [a_ptr, b_ptr] = StartHostedPair(
      job, {"--nnodes=1:2", "--max_restarts=3", "--rdzv_id=fo"});
  Child& a = *a_ptr;
  Child& b = *b_ptr;
  INFO(job.Outputs());
  const double killed_at = KillHostingAgent(a);
  REQUIRE(WaitUntil([&] { return StartedAt(job.Starts(), "b", 1) > 0; }, 20s));
  const double took = StartedAt(job.Starts(), "b", 1) - killed_at;
  std::printf(
      "[multinode] failover: the survivor's workers restarted %.2f s after "
      "kill -9 of the hosting agent\n",
      took);
  // b, on the same host, takes the port over at its first unanswered
  // heartbeat (heartbeat_interval, 1 s by default), long before
  // connection_lost_timeout (60 s) would end it.
  CHECK(took <= test_timing::ReactionBoundS(1.0));
  CHECK(b.Wait(15s) == 0);
  CHECK(b.Stderr().find("hosts it now") != std::string::npos);
  // The loss of a node spends no restart budget.
  for (const WorkerStart& s : job.Starts()) CHECK(s.restart_count == 0);
}

TEST_CASE(
    "multinode: the hosting agent killed right after the round completes, "
    "the survivor still takes over",
    "[multinode][failover]") {
  // Heartbeats every 2.5 s: b's first periodic beat would come long after
  // the kill, so b learns that it may take over only from the beat a
  // completed round sends at once.
  ElasticJob job({{"MN_FINISH_WS", "1"}}, /*external_server=*/false);
  auto [a_ptr, b_ptr] = StartHostedPair(
      job,
      {"--nnodes=1:2", "--max_restarts=3", "--rdzv_id=foearly",
       "--rdzv_conf=heartbeat_interval=2.5,heartbeat_timeout=6"},
      300ms);
  Child& a = *a_ptr;
  Child& b = *b_ptr;
  const double killed_at = KillHostingAgent(a);
  if (!WaitUntil([&] { return StartedAt(job.Starts(), "b", 1) > 0; }, 30s))
    FAIL("b did not restart alone\n" << job.Outputs());
  std::printf(
      "[multinode] failover right after the round: the survivor's workers "
      "restarted %.2f s after kill -9 of the hosting agent\n",
      StartedAt(job.Starts(), "b", 1) - killed_at);
  CHECK(b.Wait(15s) == 0);
  CHECK(b.Stderr().find("hosts it now") != std::string::npos);
}

TEST_CASE(
    "multinode: below MIN after the hosting agent died, the survivor fails "
    "clearly",
    "[multinode][failover]") {
  ElasticJob job({{"MN_SLEEP", "60"}}, /*external_server=*/false);
  auto [a, b] = StartHostedPair(
      job, {"--nnodes=2", "--rdzv_id=fomin", "--rdzv_conf=join_timeout=4"});
  INFO(job.Outputs());
  a->Kill(SIGKILL);
  // Taken over, rebuilt, the round re-forms without a: 1 < MIN = 2 until
  // join_timeout (4 s).
  CHECK(b->Wait(25s) == 1);
  CHECK(b->Stderr().find("did not reach min_nodes=2") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::multinode
