// BadHostPolicy on its own: counting, exclusion, cool-down, undo.
#include "ddprun_catch.h"

#include "rendezvous/core/bad_host_policy.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;

const Clock::TimePoint kT0 = Clock::TimePoint() + seconds(1000);

TEST_CASE("BadHostPolicy: off with 0 failures", "[rendezvous][badhost]") {
  BadHostPolicy policy("job", 0, seconds(600), seconds(300));
  for (int i = 0; i < 10; ++i) CHECK_FALSE(policy.RecordFailure("a", kT0));
  CHECK_FALSE(policy.Excluded("a", kT0));
  CHECK(policy.empty());
  CHECK_FALSE(policy.NextDeadline().has_value());
}

TEST_CASE("BadHostPolicy: K failures within the window exclude the host",
          "[rendezvous][badhost]") {
  BadHostPolicy policy("job", 3, seconds(600), seconds(300));
  CHECK_FALSE(policy.RecordFailure("a", kT0));
  CHECK_FALSE(policy.RecordFailure("b", kT0 + seconds(1)));  // another host
  CHECK_FALSE(policy.RecordFailure("a", kT0 + seconds(10)));
  CHECK_FALSE(policy.Excluded("a", kT0 + seconds(10)));
  CHECK(policy.RecordFailure("a", kT0 + seconds(20)));
  CHECK(policy.Excluded("a", kT0 + seconds(20)));
  CHECK_FALSE(policy.Excluded("b", kT0 + seconds(20)));
  CHECK(policy.NextDeadline() == kT0 + seconds(320));
  CHECK(policy.Excluded("a", kT0 + seconds(319)));
  CHECK_FALSE(policy.Excluded("a", kT0 + seconds(320)));
  // The cool-down paid for them: counting starts again after it.
  policy.Expire(kT0 + seconds(320));
  CHECK_FALSE(policy.NextDeadline().has_value());
  CHECK_FALSE(policy.RecordFailure("a", kT0 + seconds(321)));
}

TEST_CASE("BadHostPolicy: failures older than the window do not count",
          "[rendezvous][badhost]") {
  BadHostPolicy policy("job", 2, seconds(60), seconds(30));
  CHECK_FALSE(policy.RecordFailure("a", kT0));
  CHECK_FALSE(policy.RecordFailure("a", kT0 + seconds(61)));
  CHECK(policy.RecordFailure("a", kT0 + seconds(62)));
  // Expire forgets old failures and drops hosts with nothing left.
  BadHostPolicy quiet("job", 2, seconds(60), seconds(30));
  CHECK_FALSE(quiet.RecordFailure("b", kT0));
  CHECK(quiet.Tracks("b"));
  quiet.Expire(kT0 + seconds(61));
  CHECK_FALSE(quiet.Tracks("b"));
  CHECK(quiet.empty());
}

TEST_CASE("BadHostPolicy: a failure that was a node loss is undone",
          "[rendezvous][badhost]") {
  BadHostPolicy policy("job", 2, seconds(600), seconds(300));
  CHECK_FALSE(policy.RecordFailure("a", kT0));
  // Undoing a counted failure lifts nothing.
  CHECK_FALSE(policy.ForgetFailure("a", kT0));
  CHECK_FALSE(policy.RecordFailure("a", kT0 + seconds(5)));  // 1 again
  CHECK(policy.RecordFailure("a", kT0 + seconds(6)));        // excluded
  // The failure that excluded the host was a node loss: the exclusion goes.
  CHECK(policy.ForgetFailure("a", kT0 + seconds(6)));
  CHECK_FALSE(policy.Excluded("a", kT0 + seconds(7)));
  CHECK(policy.Tracks("a"));
  CHECK_FALSE(policy.ForgetFailure("unknown", kT0));
}

}  // namespace
}  // namespace ddprun::rendezvous
