// ddp-hwinfo and the hardware table (hardware.h), run as a user runs the
// tool: its output against this machine's detected hardware.

#include <algorithm>
#include <sstream>
#include <string>

#include "ddprun_catch.h"

#include "ddprun/worker/hardware.h"
#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE("ddp-hwinfo: prints this machine and the settings for the flags",
          "[worker][process][hardware]") {
  const std::string tool = wt::BinPath("ddp-hwinfo");
  ddprun::worker::HardwareInfo hw = ddprun::worker::DetectHardware();
  SECTION("report") {
    wt::RankProcess p({tool, "--world_size", "4", "--local_world_size", "2",
                       "--target_batch", "256"},
                      {});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    const std::string out = p.Output();
    INFO(out);
    REQUIRE(p.exit_code() == 0);
    REQUIRE(out.find("CPU cores: " + std::to_string(hw.cpu_cores) + "\n") !=
            std::string::npos);
    REQUIRE(out.find("GPUs: " + std::to_string(hw.gpus.size())) !=
            std::string::npos);
    // The same table the trainers use, for 4 processes, 2 per node.
    ddprun::worker::AutoSettings s =
        ddprun::worker::RecommendSettings(hw, 4, 2, 256);
    REQUIRE(s.effective_batch >= 200);
    REQUIRE(s.effective_batch <= 320);
    std::ostringstream line;
    line << "Recommended: device " << s.device << ", batch "
         << s.per_device_batch << " per process, grad accumulation "
         << s.grad_accum_steps << ", effective batch " << s.effective_batch
         << ", threads " << std::max(1, hw.cpu_cores / 2);
    REQUIRE(out.find(line.str()) != std::string::npos);
  }
  SECTION("bad flags exit 2 with a message") {
    wt::RankProcess bad({tool, "--world_size", "0"}, {});
    REQUIRE(bad.Wait(std::chrono::seconds(30)));
    REQUIRE(bad.exit_code() == 2);
    REQUIRE(bad.Output().find("--world_size must be a positive integer") !=
            std::string::npos);
    wt::RankProcess unknown({tool, "--gpus", "2"}, {});
    REQUIRE(unknown.Wait(std::chrono::seconds(30)));
    REQUIRE(unknown.exit_code() == 2);
    REQUIRE(unknown.Output().find("unknown argument '--gpus'") !=
            std::string::npos);
  }
}

}  // namespace
}  // namespace ddprun::worker::testing
