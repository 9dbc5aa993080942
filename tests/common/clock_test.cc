#include <chrono>

#include "ddprun_catch.h"

#include "common/clock.h"

namespace ddprun {
namespace {

TEST_CASE("FakeClock: time moves only when advanced", "[common]") {
  FakeClock clock;
  auto t0 = clock.Now();
  CHECK(clock.Now() == t0);
  clock.Advance(std::chrono::seconds(3));
  CHECK(clock.Now() - t0 == std::chrono::seconds(3));
}

TEST_CASE("Clock::Real: monotonic and wall time sane", "[common]") {
  auto a = Clock::Real()->Now();
  auto b = Clock::Real()->Now();
  CHECK(b >= a);
  CHECK(Clock::Real()->WallSeconds() > 1.6e9);
}

}  // namespace
}  // namespace ddprun
