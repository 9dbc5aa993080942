// Multi-process tests of ShardedAdam (sharded_adam.h): ZeRO-1/2 against AdamW,
// offload, clipping. Real ranks (rank_helper) on loopback with Gloo through a
// real TCPStore.

#include <cstdio>
#include <string>

#include "ddprun_catch.h"

#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

// ShardedAdam (gradients reduce-scattered by the optimizer) on `ranks`
// ranks x batch 8 vs AdamW on one process x batch 8*ranks: equal parameters
// after 5 steps (1e-5 absolute: fp32 summation order) and optimizer state
// 1/ranks of the unsharded one.
void CheckShardedAdam(int ranks) {
  std::string dir = TempDir();
  std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
  auto results =
      wt::RunRanks({Helper(), "zero", multi, "5", "8", "sharded"}, ranks);
  RequireAllOk(results);
  wt::RankProcess p(
      {Helper(), "zero", single, "5", std::to_string(8 * ranks), "plain"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  REQUIRE(p.exit_code() == 0);
  REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  long long numel = 0, bytes = 0;
  REQUIRE(std::sscanf(results[0].output.c_str(),
                      "rank 0 numel %lld state_bytes %lld", &numel,
                      &bytes) == 2);
  // exp_avg + exp_avg_sq in fp32 for 1/ranks of the (padded) parameters.
  REQUIRE(bytes == 2 * 4 * ((numel + ranks - 1) / ranks));
  long long full = 0;
  REQUIRE(std::sscanf(p.Output().c_str(), "rank 0 numel %lld state_bytes %lld",
                      &numel, &full) == 2);
  REQUIRE(static_cast<double>(bytes) / full ==
          Approx(1.0 / ranks).epsilon(0.01));
}

TEST_CASE("ShardedAdam: 2 ranks equal AdamW on the full batch, state 1/world",
          "[worker][process][zero]") {
  CheckShardedAdam(2);
}

TEST_CASE("ShardedAdam: 3 ranks (ring reduce-scatter on Gloo) equal AdamW",
          "[worker][process][zero]") {
  CheckShardedAdam(3);
}

// DeepSpeed's offload_optimizer {device: cpu}: the state lives in host
// memory and the update runs on the CPU. On this CPU world the parameters
// must come out as without offload (and as AdamW on the full batch), with
// the same state bytes per rank, none of them on the device.
TEST_CASE("ShardedAdam: CPU offload of the state trains like no offload",
          "[worker][process][zero]") {
  std::string dir = TempDir();
  std::string offload = dir + "/offload.bin", sharded = dir + "/sharded.bin";
  std::string single = dir + "/single.bin";
  auto with = wt::RunRanks({Helper(), "zero", offload, "5", "8", "offload"}, 2);
  RequireAllOk(with);
  auto without =
      wt::RunRanks({Helper(), "zero", sharded, "5", "8", "sharded"}, 2);
  RequireAllOk(without);
  wt::RankProcess p({Helper(), "zero", single, "5", "16", "plain"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  REQUIRE(p.exit_code() == 0);
  CHECK(MaxAbsDiff(ReadFloats(offload), ReadFloats(sharded)) < 1e-6);
  CHECK(MaxAbsDiff(ReadFloats(offload), ReadFloats(single)) < 1e-5);
  for (size_t r = 0; r < 2; ++r) {
    long long rank = -1, numel = 0, bytes = 0, device = -1;
    long long bytes_without = 0, device_without = 0;
    INFO(with[r].output);
    REQUIRE(std::sscanf(with[r].output.c_str(),
                        "rank %lld numel %lld state_bytes %lld "
                        "device_state_bytes %lld",
                        &rank, &numel, &bytes, &device) == 4);
    REQUIRE(std::sscanf(without[r].output.c_str(),
                        "rank %lld numel %lld state_bytes %lld "
                        "device_state_bytes %lld",
                        &rank, &numel, &bytes_without, &device_without) == 4);
    CHECK(bytes == 2 * 4 * ((numel + 1) / 2));
    CHECK(bytes == bytes_without);
    CHECK(device == 0);
    CHECK(device_without == bytes_without);
  }
}

TEST_CASE(
    "ShardedAdam: gradient clipping uses the reduced gradients' norm "
    "(ZeRO-2)",
    "[worker][process][zero]") {
  // 0.05 is below every step's gradient norm here: every step clips. Local
  // gradients' norms differ from the averaged gradient's, so clipping them
  // would not match clip_grad_norm_ on one process with the full batch.
  std::string dir = TempDir();
  std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
  auto results =
      wt::RunRanks({Helper(), "zero", multi, "5", "8", "sharded", "0.05"}, 2);
  RequireAllOk(results);
  wt::RankProcess p({Helper(), "zero", single, "5", "16", "plain", "0.05"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  REQUIRE(p.exit_code() == 0);
  REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-5);
  // Without clipping the runs differ: the clip did something.
  std::string unclipped = dir + "/unclipped.bin";
  wt::RankProcess q({Helper(), "zero", unclipped, "5", "16", "plain"}, {});
  REQUIRE(q.Wait(std::chrono::seconds(60)));
  REQUIRE(q.exit_code() == 0);
  REQUIRE(MaxAbsDiff(ReadFloats(unclipped), ReadFloats(single)) > 1e-4);
}

}  // namespace
}  // namespace ddprun::worker::testing
