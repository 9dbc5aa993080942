// Multi-process tests of DistributedDataParallel (ddp.h): 2 ranks against 1,
// the shared memory path, a dying rank, parameters off the device; ddp_demo.
// Real ranks (rank_helper) on loopback with Gloo through a real TCPStore.

#include <string>

#include "ddprun_catch.h"

#include "ddprun/worker/errors.h"
#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE("DistributedDataParallel: 2 ranks x batch 8 equal 1 rank x batch 16",
          "[worker][process][ddp]") {
  // Tolerance 1e-5 absolute on every parameter after 5 SGD steps: the only
  // difference is the order of the fp32 gradient sums.
  std::string dir = TempDir();
  std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
  SECTION("plain") {
    auto results = wt::RunRanks({Helper(), "ddp", multi, "5", "8"}, 2);
    RequireAllOk(results);
    // bucket_cap_mb 0.001 splits the 3244 gradient bytes in two buckets.
    for (auto& r : results) {
      INFO(r.output);
      REQUIRE(r.output.find("buckets 2 bytes 3244") != std::string::npos);
      REQUIRE(r.output.find("transport shared_memory") != std::string::npos);
    }
    wt::RankProcess p({Helper(), "ddp", single, "5", "16"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
  SECTION("gradient accumulation with NoSync and an unused branch") {
    RequireAllOk(
        wt::RunRanks({Helper(), "ddp", multi, "4", "8", "2", "unused"}, 2));
    wt::RankProcess p({Helper(), "ddp", single, "4", "16", "2", "unused"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    INFO(p.Output());
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
  SECTION("a branch that starts being used half way (find_unused_parameters)") {
    // The reducer logs when the set of unused parameters changes; without
    // a logger attached that crashed (SIGSEGV) on the first changed step.
    auto results =
        wt::RunRanks({Helper(), "ddp", multi, "4", "8", "1", "switch"}, 2);
    RequireAllOk(results);
    wt::RankProcess p({Helper(), "ddp", single, "4", "16", "1", "switch"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    INFO(p.Output());
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
  SECTION("3 ranks x batch 4 equal 1 rank x batch 12") {
    RequireAllOk(wt::RunRanks({Helper(), "ddp", multi, "5", "4"}, 3));
    wt::RankProcess p({Helper(), "ddp", single, "5", "12"}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  }
}

TEST_CASE(
    "DistributedDataParallel: shared memory gradients and buffers "
    "train like Gloo's, and DDPRUN_SHM_ALLREDUCE=0 is Gloo",
    "[worker][process][ddp][shm]") {
  std::string dir = TempDir();
  std::string shm = dir + "/shm.bin", gloo = dir + "/gloo.bin";
  // A batch norm layer: its running statistics are buffers, which DDP
  // broadcasts from rank 0 after every synchronised backward.
  auto with_shm = wt::RunRanks({Helper(), "ddp", shm, "5", "8", "1", "bn"}, 2);
  auto with_gloo = wt::RunRanks({Helper(), "ddp", gloo, "5", "8", "1", "bn"}, 2,
                                {{"DDPRUN_SHM_ALLREDUCE", "0"}});
  RequireAllOk(with_shm);
  RequireAllOk(with_gloo);
  auto buffers = [](const std::string& out) {
    size_t at = out.find("buffers ");
    return at == std::string::npos ? std::string()
                                   : out.substr(at, out.find('\n', at) - at);
  };
  for (int r = 0; r < 2; ++r) {
    INFO(with_shm[r].output << with_gloo[r].output);
    REQUIRE(with_shm[r].output.find("transport shared_memory") !=
            std::string::npos);
    REQUIRE(with_gloo[r].output.find("transport process_group") !=
            std::string::npos);
  }
  // Every rank holds rank 0's buffers after the last step (5 batches seen).
  REQUIRE_FALSE(buffers(with_shm[0].output).empty());
  REQUIRE(buffers(with_shm[0].output).find(" 5") != std::string::npos);
  REQUIRE(buffers(with_shm[0].output) == buffers(with_shm[1].output));
  REQUIRE(buffers(with_gloo[0].output) == buffers(with_gloo[1].output));
  // Same averaged gradients up to the order of fp32 sums.
  REQUIRE(MaxAbsDiff(ReadFloats(shm), ReadFloats(gloo)) < 1e-5);

  auto bad = wt::RunRanks({Helper(), "ddp", shm, "1", "8"}, 2,
                          {{"DDPRUN_SHM_ALLREDUCE", "yes"}});
  for (auto& r : bad) {
    INFO(r.output);
    REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
    REQUIRE(r.output.find("DDPRUN_SHM_ALLREDUCE must be 0 or 1") !=
            std::string::npos);
  }
}

TEST_CASE(
    "DistributedDataParallel: a rank that dies mid-training fails its "
    "shared memory peer at once, naming it",
    "[worker][process][ddp][shm]") {
  // Without the liveness check rank 0 would wait the collective timeout
  // (30 min) in the gradient all-reduce; RunRanks kills it after 60 s.
  std::string dir = TempDir();
  const auto start = std::chrono::steady_clock::now();
  auto results = wt::RunRanks({Helper(), "ddp", dir + "/p.bin", "5", "8"}, 2,
                              {{"DDP_RANK1_EXITS_AT", "2"}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  INFO(results[0].output);
  REQUIRE(results[1].exit_code == 3);
  REQUIRE(results[0].exit_code == kExitCollective);
  REQUIRE(results[0].output.find("rank 1 (pid") != std::string::npos);
  REQUIRE(results[0].output.find("exited") != std::string::npos);
  REQUIRE(seconds < 30);
}

TEST_CASE(
    "DistributedDataParallel: the buckets are rebuilt by the gradients' "
    "ready order within step 1, the step that recorded it",
    "[worker][process][ddp]") {
  // Rebuilt at step 2's start (torch's place), a peer lost right after step
  // 1 failed the rebuild's broadcast, and the survivors healed to step 1
  // with the parameter-order buckets: the redone step 2 summed in another
  // order than the uninterrupted run (a ddpm kill at step 1 on 2 nodes
  // ended equal to float rounding only). A checkpoint of step 1 too.
  auto results = wt::RunRanks({Helper(), "ddp_rebuild"}, 2);
  RequireAllOk(results);
  std::string after[2];
  for (int r = 0; r < 2; ++r) {
    INFO(results[r].output);
    const std::string& out = results[r].output;
    auto line = [&](const std::string& when) {
      const std::string key = "rank " + std::to_string(r) + " " + when + " ";
      size_t at = out.find(key);
      REQUIRE(at != std::string::npos);
      at += key.size();
      return out.substr(at, out.find('\n', at) - at);
    };
    const std::string before = line("before");
    after[r] = line("after_step_1");
    CHECK(after[r] != before);
    // The layer that runs last (parameters 0 and 1) has its gradients ready
    // first: its parameters now lead the first bucket.
    CHECK((after[r].rfind("[0 ", 0) == 0 || after[r].rfind("[1 ", 0) == 0));
  }
  CHECK(after[0] == after[1]);
}

TEST_CASE("ddp_demo: 2 ranks all-reduce and fit with identical replicas",
          "[worker][process][demo]") {
  auto results = wt::RunRanks({wt::BinPath("ddp_demo"), "--steps", "20"}, 2);
  RequireAllOk(results);
  for (int r = 0; r < 2; ++r) {
    const std::string& out = results[r].output;
    REQUIRE(out.find("rank " + std::to_string(r) +
                     " all_reduce(sum of rank+1) = 3 (expected 3)") !=
            std::string::npos);
    REQUIRE(out.find("(target 3, -1) OK") != std::string::npos);
  }
  REQUIRE(results[0].output.find("[ddp_demo] step 20 loss") !=
          std::string::npos);
  REQUIRE(results[1].output.find("[ddp_demo] step 20 loss") ==
          std::string::npos);
}

TEST_CASE(
    "DistributedDataParallel: a parameter off the world's device is a "
    "usage error saying so",
    "[worker][process]") {
  // A rank that finds the problem first may leave while its peer still
  // connects the Gloo mesh: that peer then fails as a collective (75).
  auto results = wt::RunRanks({Helper(), "ddp_device"}, 2);
  int usage = 0;
  for (const auto& r : results) {
    INFO(r.output);
    REQUIRE(r.output.find("differs between ranks") == std::string::npos);
    if (r.exit_code == kExitCollective) continue;
    REQUIRE(r.exit_code == ddprun::worker::kExitUsage);
    REQUIRE(r.output.find("parameter 0 [2] is on meta but the world's device "
                          "is cpu (backend gloo): move the model to "
                          "world.device()") != std::string::npos);
    ++usage;
  }
  REQUIRE(usage >= 1);
}

}  // namespace
}  // namespace ddprun::worker::testing
