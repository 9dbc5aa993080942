// Hang diagnosis across nodes: two real ddprun agents on loopback
// (--nnodes=2, 2 workers each, the first hosting the rendezvous) running a
// Gloo job of Debian's python3 with torch (tests/agent/data/hang_worker.py).
// Skipped without torch.

#include "ddprun_catch.h"
#include <fstream>

#include "ddprun_skip.h"
#include "tests/agent/watch/stack_test_util.h"

namespace ddprun::test {
namespace {

const std::string kRendezvous = DDPRUN_BIN_DIR "/ddprun-rendezvous";

// Agent `node` (0 hosts the rendezvous) of a 2-node job of 2 workers each.
std::unique_ptr<Ddprun> Agent(const TempDir& dir, int node, int port,
                              const std::string& id,
                              std::vector<std::string> extra,
                              std::map<std::string, std::string> env,
                              const std::string& script = kHangWorker) {
  std::vector<std::string> args = {
      "--nnodes=2", "--nproc_per_node=2", "--node_rank=" + std::to_string(node),
      "--rdzv_backend=c10d",
      "--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=" + id,
      "--log_dir", dir.path() + "/logs"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(script);
  env["PYTHON_EXEC"] = kPython;
  env["OMP_NUM_THREADS"] = "1";
  return std::make_unique<Ddprun>(dir, args, env);
}

TEST_CASE("ddprun across two nodes: the watchdog names the rank that hangs, "
          "its node and its line",
          "[agent][process][stacks][multinode]") {
  if (!HaveTorch()) DDPRUN_SKIP(kPython << " has no torch.distributed");
  TempDir a, b;
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  // Rank 3 (node 1's local rank 1) sleeps in load_batch at step 2; ranks
  // 0-2 wait in its all_reduce, on both nodes.
  const std::map<std::string, std::string> env = {{"HANG_RANK", "3"},
                                                  {"HANG_STEP", "2"}};
  const std::vector<std::string> flags = {"--max_restarts=0",
                                          "--watchdog_timeout=3"};
  auto node0 = Agent(a, 0, port, "hang2", flags, env);
  // Node 0 hosts the rendezvous: node 1 starts once it listens.
  REQUIRE(testing::WaitForPort(port, 30s));
  auto node1 = Agent(b, 1, port, "hang2", flags, env);
  REQUIRE(WaitForFiles({b.path() + "/hanging"}, 45s));
  const auto hung_at = Clock::now();
  const std::string verdict =
      ") is in hang_worker.py:" + std::to_string(LineOf("HANG_LINE")) +
      " in load_batch while ranks 0-2 wait in all_reduce (hang_worker.py:" +
      std::to_string(LineOf("WAIT_LINE")) + " in main)";
  const bool diagnosed = WaitForText(b.path() + "/ddprun.err",
                                     "hang diagnosis: rank 3 (node 1: ", 15s);
  const double took =
      std::chrono::duration<double>(Clock::now() - hung_at).count();
  std::printf(
      "[agent] stacks: 4-rank hang over 2 nodes diagnosed %.2f s after the "
      "rank stopped (--watchdog_timeout=3)\n",
      took);
  CHECK(diagnosed);
  CHECK(node1->Wait(20s) == 1);
  CHECK(node0->Wait(20s) == 1);
  const std::string err1 = node1->Stderr();
  const std::string err0 = node0->Stderr();
  INFO("node 0:\n" << err0 << "\nnode 1:\n" << err1);
  // The node of the hung rank prints every rank, the failure table has the
  // verdict; node 0 (which hosts the rendezvous) sees it too.
  CHECK(Contains(err1, "hang diagnosis: rank 3 (node 1: "));
  CHECK(Contains(err1, verdict));
  CHECK(Contains(err1, "  rank 0 (node 0: "));
  CHECK(Contains(err1, "  rank 2 (node 1: "));
  CHECK(Contains(err1, "; hang diagnosis: rank 3 (node 1: "));
  CHECK(Contains(err0, "hang diagnosis: rank 3 (node 1: "));
  CHECK(Contains(err0, verdict));
  // Every rank's stacks were written on its own node before the kill.
  const std::string run0 = OnlyEntry(a.path() + "/logs") + "/";
  const std::string run1 = OnlyEntry(b.path() + "/logs") + "/";
  CHECK(Contains(ReadFile(run0 + "attempt_0/0/stacks.txt"),
                 "hang_worker.py\", line " +
                     std::to_string(LineOf("WAIT_LINE"))));
  CHECK(Contains(ReadFile(run1 + "attempt_0/1/stacks.txt"),
                 "hang_worker.py\", line " +
                     std::to_string(LineOf("HANG_LINE"))));
  CHECK(took < 3 + 1 + 2 + 3);
}

TEST_CASE("ddprun-rendezvous --stacks dumps a running 2-node job, which "
          "then finishes",
          "[agent][process][stacks][multinode]") {
  if (!HaveTorch()) DDPRUN_SKIP(kPython << " has no torch.distributed");
  TempDir a, b;
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  auto node0 = Agent(a, 0, port, "ondemand", {}, {});
  REQUIRE(testing::WaitForPort(port, 30s));  // node 0 hosts the store
  auto node1 = Agent(b, 1, port, "ondemand", {}, {});
  REQUIRE(WaitForFiles({a.path() + "/step_0", b.path() + "/step_3"}, 45s));
  const auto asked = Clock::now();
  // The agents answer on their next heartbeat: 0.4-1.1 s here, but 8 s was
  // once too short under CI's -j2 load, so the bound is generous.
  const std::string out =
      Capture(kRendezvous + " --stacks 127.0.0.1:" + std::to_string(port) +
              " --rdzv_id ondemand --stacks_timeout 30; echo rc=$?");
  std::printf("[agent] stacks: ddprun-rendezvous --stacks of 4 ranks on 2 "
              "nodes took %.2f s\n",
              std::chrono::duration<double>(Clock::now() - asked).count());
  INFO(out);
  CHECK(Contains(out, "rc=0"));
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(Contains(out, "  rank " + std::to_string(rank) + " (node " +
                            std::to_string(rank / 2) + ": "));
  }
  // A running job: the ranks are mostly in their 50 ms sleep, but a rank
  // caught in its file write or all_reduce is a fair answer too.
  CHECK(Contains(out, "diagnosis: "));
  // Each agent wrote its workers' stacks; the job goes on and ends well.
  CHECK(Contains(ReadFile(OnlyEntry(b.path() + "/logs") + "/" + "attempt_0/1/stacks.txt"),
                 "# ddprun stack dump: rank 3 (pid "));
  // Another job is a clear error (while node 0 still serves): the server
  // an agent hosts serves its own job only.
  const std::string unknown =
      Capture(kRendezvous + " --stacks 127.0.0.1:" + std::to_string(port) +
              " --rdzv_id nosuchjob 2>&1; echo rc=$?");
  CHECK(Contains(unknown, "serves only that job, not 'nosuchjob'"));
  CHECK(Contains(unknown, "rc=1"));
  std::ofstream(a.path() + "/go") << "1";
  CHECK(node0->Wait(20s) == 0);
  CHECK(node1->Wait(20s) == 0);
  INFO(node0->Stderr() << node1->Stderr());
  CHECK(Contains(node1->Stderr(), "stack dump requested through the "
                                  "rendezvous (ddprun-rendezvous --stacks)"));
}

TEST_CASE("ddprun across two nodes: a rank slower than the job's median is "
          "warned about, --status shows every rank's step rate",
          "[agent][process][stragglers][multinode]") {
  // Plain python3 (no torch): each rank counts its steps with
  // ddprun_steps.step(); rank 3 (node 1) steps about 10x slower.
  TempDir a, b;
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  const std::map<std::string, std::string> env = {
      {"SLOW_RANK", "3"}, {"SLOW_S", "0.2"}, {"FAST_S", "0.02"},
      {"RUN_S", "9"}};
  const std::vector<std::string> flags = {"--straggler_time=2"};
  const std::string script = kData + "/step_worker.py";
  auto node0 = Agent(a, 0, port, "slow", flags, env, script);
  REQUIRE(testing::WaitForPort(port, 30s));  // node 0 hosts the store
  auto node1 = Agent(b, 1, port, "slow", flags, env, script);
  const auto started = Clock::now();
  const bool warned = WaitForText(b.path() + "/ddprun.err",
                                  "straggler: rank 3 runs at ", 12s);
  std::printf("[agent] stragglers: rank 3 of 4 (2 nodes) warned about %.2f s "
              "after the agents started (--straggler_time=2)\n",
              std::chrono::duration<double>(Clock::now() - started).count());
  const std::string status =
      Capture(kRendezvous + " --status 127.0.0.1:" + std::to_string(port) +
              " --rdzv_id slow");
  CHECK(node0->Wait(20s) == 0);
  CHECK(node1->Wait(20s) == 0);
  const std::string err0 = node0->Stderr();
  const std::string err1 = node1->Stderr();
  INFO("status:\n" << status << "\nnode 0:\n" << err0 << "\nnode 1:\n"
                   << err1);
  CHECK(warned);
  // Against the job's median (the rendezvous has every node's rates).
  CHECK(Contains(err1, "the job's median "));
  CHECK(Contains(err1, " (local_rank 1, pid "));
  // No fast rank is a straggler.
  CHECK_FALSE(Contains(err0, "straggler: "));
  CHECK_FALSE(Contains(err1, "straggler: rank 2 "));
  CHECK(Contains(status, "steps/s: rank 0 "));
  CHECK(Contains(status, " rank 3 "));
}

}  // namespace
}  // namespace ddprun::test
