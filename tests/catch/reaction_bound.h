// Wall-clock bounds on how fast ddprun reacts (to a killed node, a lost
// server, a stubborn worker), derived from the timeout the test configures
// to trigger the reaction rather than picked as round numbers.
#pragma once

namespace ddprun::test_timing {

// What a bound allows beyond the configured timeout: the reaction itself
// (stopping and starting processes, a rendezvous round, LibTorch workers
// loading) takes about a second on an idle machine and several on the
// 2-core CI machine with a build and another test beside it. Every failure
// these bounds guard against is a wait far longer than timeout + slack (a
// 20-60 s connection_lost_timeout, a 300 s exit barrier, a 600 s
// join_timeout, or no reaction at all), so this slack costs them nothing.
inline constexpr double kLoadSlackS = 10.0;

// The bound on a reaction that `configured_s` of configured timeouts
// trigger.
inline constexpr double ReactionBoundS(double configured_s) {
  return configured_s + kLoadSlackS;
}

}  // namespace ddprun::test_timing
