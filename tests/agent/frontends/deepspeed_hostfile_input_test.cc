// Hostfile lines the fuzz target (tests/fuzz/deepspeed_hostfile_fuzz_target.cc)
// found read otherwise than deepspeed's runner.py reads them.
#include "ddprun_catch.h"

#include "agent/frontends/deepspeed/deepspeed_hosts.h"

namespace ddprun::agent {

TEST_CASE(
    "ParseHostfile: a carriage return inside a line separates words, as "
    "whitespace does in deepspeed's pattern",
    "[deepspeed][hostile]") {
  // "worker\r-3" was taken as a host (and would have gone to ssh with the
  // '\r'); deepspeed's ^(\S+)\s+slots=(\d+) refuses the line.
  StatusOr<ResourcePool> bad = ParseHostfile("hf", "worker\r-3 slots=4\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("hf:1: expected 'HOST slots=N'"));
  // And separates the host from slots= where a blank would.
  StatusOr<ResourcePool> pool =
      ParseHostfile("hf", "worker-1\rslots=4\nworker-2\vslots=2\n");
  REQUIRE(pool.ok());
  CHECK(*pool == ResourcePool{{"worker-1", 4}, {"worker-2", 2}});
}

}  // namespace ddprun::agent
