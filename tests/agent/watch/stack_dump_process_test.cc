// Stack dumps of real workers: Gloo jobs of Debian's python3 with torch
// (tests/agent/data/hang_worker.py) under the real ddprun. The watchdog
// explains a hang before it kills; SIGUSR2 dumps a running job's stacks and
// the job goes on.

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "tests/agent/watch/stack_test_util.h"

namespace ddprun::test {
namespace {

void RequireTorch() {
  INFO("these tests need Debian's python3-torch for " + kPython);
  REQUIRE(HaveTorch());
}

TEST_CASE("ddprun: the watchdog names the rank that hangs and its line",
          "[agent][process][stacks]") {
  RequireTorch();
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  // Rank 2 stops in load_batch at step 2; ranks 0, 1 and 3 wait in its
  // all_reduce. Every rank's heartbeat goes silent at about the same time:
  // the watchdog alone cannot tell which rank is at fault.
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=4", "--max_restarts=0",
              "--watchdog_timeout=3", "--log_dir", logs, kHangWorker},
             {{"PYTHON_EXEC", kPython},
              {"HANG_RANK", "2"},
              {"HANG_STEP", "2"},
              {"OMP_NUM_THREADS", "1"}});
  REQUIRE(WaitForFiles({dir.path() + "/hanging"}, 90s));
  const auto hung_at = Clock::now();
  REQUIRE(run.Wait(60s) == 1);
  const double took =
      std::chrono::duration<double>(Clock::now() - hung_at).count();
  std::printf(
      "[agent] stacks: 4-rank hang diagnosed and the job ended %.2f s after "
      "the rank stopped (--watchdog_timeout=3)\n",
      took);
  CHECK(took < 3 + 1 + 2 + 3);  // timeout, checks, the dump's 2 s, the stop
  const std::string err = run.Stderr();
  INFO(err);
  const std::string verdict =
      ") is in hang_worker.py:" + std::to_string(LineOf("HANG_LINE")) +
      " in load_batch while ranks 0,1,3 wait in all_reduce (hang_worker.py:" +
      std::to_string(LineOf("WAIT_LINE")) + " in main)";
  CHECK(Contains(err, "hang diagnosis: rank 2 (pid "));
  CHECK(Contains(err, verdict));
  // The failure table carries it too.
  CHECK(Contains(err, "traceback : killed by the ddprun watchdog: without a "
                      "heartbeat for "));
  CHECK(Contains(err, "; hang diagnosis: rank 2 (pid "));
  // Every rank's stacks, every thread, in the log layout.
  const std::string run_dir = OnlyEntry(logs);
  REQUIRE_FALSE(run_dir.empty());
  for (int lr = 0; lr < 4; ++lr) {
    const std::string stacks = ReadFile(run_dir + "/attempt_0/" +
                                        std::to_string(lr) + "/stacks.txt");
    INFO("local rank " << lr << ":\n" << stacks);
    CHECK(Contains(stacks, "# ddprun stack dump: rank " + std::to_string(lr)));
    CHECK(Contains(stacks, "Current thread 0x"));
    CHECK(Contains(stacks, "hang_worker.py\", line " +
                               std::to_string(LineOf(lr == 2 ? "HANG_LINE"
                                                             : "WAIT_LINE"))));
  }
}

TEST_CASE("ddprun: a rank whose data loader thread stopped is named",
          "[agent][process][stacks]") {
  RequireTorch();
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=2", "--max_restarts=0",
              "--watchdog_timeout=2", "--log_dir", logs, kHangWorker},
             {{"PYTHON_EXEC", kPython},
              {"HANG_RANK", "1"},
              {"HANG_MODE", "loader"},
              {"OMP_NUM_THREADS", "1"}});
  REQUIRE(WaitForFiles({dir.path() + "/hanging"}, 90s));
  REQUIRE(run.Wait(30s) == 1);
  const std::string err = run.Stderr();
  INFO(err);
  // Its main thread waits in the standard library's queue.get, called from
  // load_batch; rank 0 waits in all_reduce.
  CHECK(Contains(err, "hang diagnosis: rank 1 (pid "));
  CHECK(Contains(err, ") waits in get (hang_worker.py:" +
                          std::to_string(LineOf("GET_LINE")) +
                          " in load_batch) while rank 0 waits in all_reduce"));
  // The loader thread's own frame is in rank 1's file.
  const std::string stacks =
      ReadFile(OnlyEntry(logs) + "/attempt_0/1/stacks.txt");
  INFO(stacks);
  CHECK(Contains(stacks, "hang_worker.py\", line " +
                             std::to_string(LineOf("LOADER_LINE")) +
                             " in _loader"));
}

TEST_CASE("ddprun: SIGUSR2 dumps a running job's stacks, the job goes on",
          "[agent][process][stacks]") {
  RequireTorch();
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=2", "--log_dir", logs,
              kHangWorker},
             {{"PYTHON_EXEC", kPython}, {"OMP_NUM_THREADS", "1"}});
  REQUIRE(WaitForFiles({dir.path() + "/step_0", dir.path() + "/step_1"}, 90s));
  const auto asked = Clock::now();
  kill(run.pid(), SIGUSR2);
  const std::string run_dir = OnlyEntry(logs);
  REQUIRE_FALSE(run_dir.empty());
  for (int lr = 0; lr < 2; ++lr) {
    const std::string stacks =
        run_dir + "/attempt_0/" + std::to_string(lr) + "/stacks.txt";
    INFO(ReadFile(stacks));
    CHECK(WaitForText(stacks, "hang_worker.py\", line ", 10s));
    CHECK(Contains(ReadFile(stacks), "# ddprun stack dump: rank " +
                                         std::to_string(lr) + " (pid "));
  }
  CHECK(WaitForText(dir.path() + "/ddprun.err", "every thread's stack: ", 5s));
  std::printf("[agent] stacks: dump on demand of 2 ranks printed %.2f s after "
              "SIGUSR2\n",
              std::chrono::duration<double>(Clock::now() - asked).count());
  // The job was not disturbed: it finishes when told to.
  std::ofstream(dir.path() + "/go") << "1";
  REQUIRE(run.Wait(60s) == 0);
  const std::string err = run.Stderr();
  INFO(err);
  CHECK(Contains(err, "stack dump: "));
  CHECK(Contains(err, "  rank 0 (pid "));
  CHECK(Contains(err, "  rank 1 (pid "));
  // Debian's own sitecustomize (or none, as without ddprun) still ran.
  const std::string own = Capture(
      kPython + " -c 'import sitecustomize as s; print(s.__file__)' "
                "2>/dev/null || echo none");
  CHECK(ReadFile(dir.path() + "/site_0") == own);
  CHECK(ReadFile(dir.path() + "/site_1") == own);
}

TEST_CASE("ddprun: the watchdog names the stopped C++ rank and its step",
          "[agent][process][stacks]") {
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  Ddprun run(dir,
             {"--nproc_per_node=3", "--max_restarts=0", "--watchdog_timeout=2",
              "--log_dir", logs, "--no_python",
              DDPRUN_BIN_DIR "/native_hang_worker"},
             {{"HANG_RANK", "1"}});
  REQUIRE(run.Wait(30s) == 1);
  const std::string err = run.Stderr();
  INFO(err);
  CHECK(Contains(err, "hang diagnosis: rank 1 (pid "));
  CHECK(Contains(err, ") is in no collective (step 4) while ranks 0,2 wait in "
                      "all_reduce (step 4)"));
  CHECK(Contains(err, "  rank 0 (pid "));
  CHECK(Contains(err, "native: in all_reduce, step 4, "));
  const std::string run_dir = OnlyEntry(logs);
  REQUIRE_FALSE(run_dir.empty());
  for (int lr = 0; lr < 3; ++lr) {
    const std::string stacks = ReadFile(run_dir + "/attempt_0/" +
                                        std::to_string(lr) + "/stacks.txt");
    INFO(stacks);
    CHECK(Contains(stacks, "# ddprun native stacks: pid "));
    CHECK(Contains(stacks, " (current):\n"));
    CHECK(Contains(stacks, "# end of native stacks"));
    // Heartbeat() counted the 4 steps (150 ms apart) in DDPRUN_STEP_FILE,
    // the straggler check's input.
    CHECK(ReadFile(run_dir + "/attempt_0/" + std::to_string(lr) + "/steps") ==
          "4\n");
  }
}

TEST_CASE("ddprun: SIGUSR2 leaves a worker without the hook alone",
          "[agent][process][stacks]") {
  TempDir dir;
  // The worker ends as `sleep 60`, which has no handler for the dump signal
  // (its default action would kill it): it must never get it, although its
  // stacks file exists.
  Ddprun run(dir, {"--nproc_per_node=1", "--no_python",
                   kData + "/stacks_file_no_handler.sh"});
  REQUIRE(WaitForFiles({dir.path() + "/pid_0"}));
  const int pid = std::stoi(ReadFile(dir.path() + "/pid_0"));
  kill(run.pid(), SIGUSR2);
  CHECK(WaitForText(dir.path() + "/ddprun.err", "no worker gave a stack", 5s));
  // A fixed pause on purpose: what is checked is that nothing happens (a
  // signal with the default action would kill the worker within it).
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(IsDead(pid));
  kill(run.pid(), SIGTERM);
  CHECK(run.Wait(10s) == 128 + SIGTERM);
}

}  // namespace
}  // namespace ddprun::test
