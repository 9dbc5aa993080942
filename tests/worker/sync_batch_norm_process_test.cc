// Multi-process tests of SyncBatchNorm (sync_batch_norm.h) across ranks.
// Real ranks (rank_helper) on loopback with Gloo through a real TCPStore.

#include <string>

#include "ddprun_catch.h"

#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE(
    "SyncBatchNorm: 2 ranks x batch 4 normalise like 1 rank x batch 8, "
    "through DDP's shared memory group as over Gloo",
    "[worker][process][syncbn]") {
  // Tolerance 1e-4 absolute on parameters and running stats after 4 steps
  // (statistics summed in a different order).
  for (const char* dims : {"2", "3"}) {
    CAPTURE(dims);
    std::string dir = TempDir();
    std::string multi = dir + "/multi.bin", single = dir + "/single.bin";
    auto ranks = wt::RunRanks({Helper(), "syncbn", multi, "4", "4", dims}, 2);
    RequireAllOk(ranks);
    // The statistics' all-reduces go through DDP's shared memory group.
    for (const auto& r : ranks) {
      INFO(r.output);
      REQUIRE(r.output.find("world collectives shared_memory") !=
              std::string::npos);
    }
    wt::RankProcess p({Helper(), "syncbn", single, "4", "8", dims}, {});
    REQUIRE(p.Wait(std::chrono::seconds(60)));
    INFO(p.Output());
    REQUIRE(p.exit_code() == 0);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(single)) < 1e-4);
    // Over Gloo alone the same training, to float rounding.
    std::string gloo = dir + "/gloo.bin";
    auto over_gloo = wt::RunRanks({Helper(), "syncbn", gloo, "4", "4", dims}, 2,
                                  {{"DDPRUN_SHM_ALLREDUCE", "0"}});
    RequireAllOk(over_gloo);
    REQUIRE(over_gloo[0].output.find("world collectives process_group") !=
            std::string::npos);
    REQUIRE(MaxAbsDiff(ReadFloats(multi), ReadFloats(gloo)) < 1e-5);
  }
}

TEST_CASE(
    "SyncBatchNorm: per-rank statistics combine stably when the mean "
    "dwarfs the spread",
    "[worker][process][syncbn]") {
  // Values 1000 +- 0.01 on 2 ranks: E[x^2] - E[x]^2 from float sums loses
  // the variance entirely; Chan's combination matches float64.
  auto results = wt::RunRanks({Helper(), "syncbn_offset", "1000", "4"}, 2);
  RequireAllOk(results);
  // The same check standalone (one rank, no collectives).
  wt::RankProcess p({Helper(), "syncbn_offset", "1000", "8"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(60)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == 0);
}

}  // namespace
}  // namespace ddprun::worker::testing
