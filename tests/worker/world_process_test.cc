// Multi-process tests of World (world.h): collectives, backend choice,
// rendezvous through the store, missing peers, the agent-hosted store. Real
// ranks (rank_helper) on loopback with Gloo through a real TCPStore.

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ddprun_catch.h"

#include "ddprun/worker/errors.h"
#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE("World: all-reduce, broadcast and variable all-gather on 3 ranks",
          "[worker][process]") {
  auto results = wt::RunRanks({Helper(), "collectives"}, 3);
  RequireAllOk(results);
  for (auto& r : results) {
    REQUIRE(r.output.find("ok backend gloo agent_store 0") !=
            std::string::npos);
  }
}

TEST_CASE(
    "World: with a shared memory group attached, every collective gives "
    "the process group's results on 3 ranks",
    "[worker][process][shm]") {
  // Sums and averages of float and double (chunked past a 1 MB slot),
  // broadcast from the last rank, and what the group cannot take (int64
  // max) through the process group, all checked by the helper; the version
  // of a tensor written through the segment moves.
  auto results = wt::RunRanks({Helper(), "collectives", "shm"}, 3);
  RequireAllOk(results);
  for (int r = 0; r < 3; ++r) {
    INFO(results[r].output);
    REQUIRE(results[r].output.find("rank " + std::to_string(r) +
                                   " shared memory ok") != std::string::npos);
  }
}

TEST_CASE("World: DDPRUN_BACKEND picks the backend or names what is wrong",
          "[worker][process]") {
  SECTION("gloo forced") {
    auto results = wt::RunRanks({Helper(), "collectives"}, 2,
                                {{"DDPRUN_BACKEND", "gloo"}});
    RequireAllOk(results);
    for (auto& r : results) {
      REQUIRE(r.output.find("ok backend gloo") != std::string::npos);
    }
  }
  SECTION("an unknown backend is a usage error, not a hang") {
    auto results =
        wt::RunRanks({Helper(), "collectives"}, 2, {{"DDPRUN_BACKEND", "mpi"}});
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
      REQUIRE(r.output.find("unknown backend 'mpi' (expected auto, gloo or "
                            "nccl)") != std::string::npos);
    }
  }
  SECTION(
      "DDPRUN_DEVICE: an unknown device or NCCL on the CPU is a usage "
      "error") {
    for (auto [env, message] : std::vector<
             std::pair<std::map<std::string, std::string>, std::string>>{
             {{{"DDPRUN_DEVICE", "tpu"}},
              "unknown device 'tpu' (expected auto, cpu or cuda)"},
             {{{"DDPRUN_DEVICE", "cpu"}, {"DDPRUN_BACKEND", "nccl"}},
              "backend nccl reduces CUDA tensors only: device cpu needs "
              "backend gloo"}}) {
      auto results = wt::RunRanks({Helper(), "collectives"}, 2, env);
      for (auto& r : results) {
        INFO(r.output);
        REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
        REQUIRE(r.output.find(message) != std::string::npos);
      }
    }
  }
#if !DDPRUN_WORKER_WITH_CUDA
  SECTION("gloo on CUDA on a CPU-only LibTorch says so") {
    auto results =
        wt::RunRanks({Helper(), "collectives"}, 2,
                     {{"DDPRUN_BACKEND", "gloo"}, {"DDPRUN_DEVICE", "cuda"}});
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
      REQUIRE(r.output.find("backend gloo on device cuda requested but this "
                            "LibTorch was built without CUDA") !=
              std::string::npos);
    }
  }
  SECTION("nccl on a CPU-only LibTorch says so") {
    auto results = wt::RunRanks({Helper(), "collectives"}, 2,
                                {{"DDPRUN_BACKEND", "nccl"}});
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
      REQUIRE(r.output.find("built without CUDA") != std::string::npos);
    }
  }
#endif
}

TEST_CASE("World: with no launcher env a trainer runs as a single process",
          "[worker][process]") {
  wt::RankProcess p({Helper(), "collectives"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == 0);
  REQUIRE(p.Output().find("rank 0 of 1 ok backend none") != std::string::npos);
}

TEST_CASE(
    "World: a rank that writes to a dead peer's socket gets EPIPE, not a "
    "SIGPIPE that kills it",
    "[worker][process]") {
  // Found under --restart_scope failed: a survivor whose Gloo send hit the
  // killed rank's socket died of signal 13, and the group restarted.
  auto results = wt::RunRanks({Helper(), "closed_socket"}, 2);
  RequireAllOk(results);
  for (int r = 0; r < 2; ++r) {
    INFO(results[r].output);
    REQUIRE(results[r].output.find("rank " + std::to_string(r) +
                                   " lived on: EPIPE") != std::string::npos);
  }
}

TEST_CASE("World: a peer that never arrives is a clear, restartable error",
          "[worker][process]") {
  std::string dir = TempDir();
  auto env = wt::RankEnv(0, 2, wt::FreeLoopbackPort());
  env["TORCHELASTIC_ERROR_FILE"] = dir + "/error.json";
  wt::RankProcess p({Helper(), "throw", "init"}, env);
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == kExitCollective);
  REQUIRE(p.Output().find("1 of 2 ranks arrived") != std::string::npos);
  std::string json = ReadText(dir + "/error.json");
  REQUIRE(json.find("CollectiveError: timed out") != std::string::npos);
}

TEST_CASE("World: ranks under Debian's torchrun use its agent store",
          "[worker][process][torchrun]") {
  // torchrun's static rendezvous sets TORCHELASTIC_USE_AGENT_STORE=True: the
  // agent hosts the TCPStore and workers use the /worker/attempt_N prefix.
  // Debian's torchrun needs tests/compat/torchrun_fixes.py to start (Python
  // 3.11 under 1.13; no libuv under 2.6); the workers here are ours.
  std::string dir = TempDir();
  std::string fixes =
      std::string(DDPRUN_SOURCE_DIR) + "/tests/compat/torchrun_fixes.py";
  REQUIRE(std::system(("cp " + fixes + " " + dir).c_str()) == 0);
  {
    std::ofstream site(dir + "/sitecustomize.py");
    site << "import torchrun_fixes\ntorchrun_fixes.apply()\n";
  }
  std::string cmd = "cd " + dir + " && PYTHONPATH=" + dir +
                    " OMP_NUM_THREADS=1 timeout 120 /usr/bin/python3 -m "
                    "torch.distributed.run --nnodes=1 --node_rank=0 "
                    "--master_addr=127.0.0.1 --master_port=" +
                    std::to_string(wt::FreeLoopbackPort()) +
                    " --nproc_per_node=2 --no_python " + Helper() + " ";
  SECTION("collectives succeed") {
    REQUIRE(std::system((cmd + "collectives > out.txt 2>&1").c_str()) == 0);
    std::string out = ReadText(dir + "/out.txt");
    INFO(out);
    REQUIRE(out.find("rank 0 of 2 ok backend gloo agent_store 1") !=
            std::string::npos);
    REQUIRE(out.find("rank 1 of 2 ok backend gloo agent_store 1") !=
            std::string::npos);
  }
  SECTION("torchrun reports our error file as the root cause") {
    REQUIRE(std::system((cmd + "throw runtime > out.txt 2>&1").c_str()) != 0);
    std::string out = ReadText(dir + "/out.txt");
    INFO(out);
    REQUIRE(out.find("Root Cause (first observed failure)") !=
            std::string::npos);
    REQUIRE(out.find("std::runtime_error: loss is NaN at step 7") !=
            std::string::npos);
  }
}

TEST_CASE("World: groups can join twice through one agent-hosted store",
          "[worker][process]") {
  // The agent's store outlives worker restarts; the second group must not
  // read the first group's keys (generation-scoped join and PG prefix).
  int port = wt::FreeLoopbackPort();
  wt::RankProcess host({Helper(), "host_store", std::to_string(port), "60"},
                       {});
  // A readiness wait, not a bound under test: the helper loads LibTorch
  // first, which took over 5 s (the old fixed 50 x 100 ms) on the 2-core
  // machine with two trainers running.
  REQUIRE(ddprun::testing::WaitUntil(
      [&] { return host.Output().find("store up") != std::string::npos; },
      std::chrono::seconds(30)));
  std::map<std::string, std::string> env = {
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_RESTART_COUNT", "0"}};
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto results = wt::RunRanks({Helper(), "collectives"}, 2, env,
                                std::chrono::seconds(30), port);
    RequireAllOk(results);
    REQUIRE(results[0].output.find("agent_store 1") != std::string::npos);
  }
}

}  // namespace
}  // namespace ddprun::worker::testing
