// Multi-process tests of mixed precision (precision.h): autocast, GradScaler,
// clipping, LR scaling. Real ranks (rank_helper) on loopback with Gloo through
// a real TCPStore.

#include <string>

#include "ddprun_catch.h"

#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE("AutocastScope: CPU bf16 autocast, GradScaler, clipping, LR scaling",
          "[worker][process]") {
  wt::RankProcess p({Helper(), "amp"}, {});
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  INFO(p.Output());
  REQUIRE(p.exit_code() == 0);
}

}  // namespace
}  // namespace ddprun::worker::testing
