// RestartBudget on its own: charge, refund, exhaustion, rebuild.
#include "ddprun_catch.h"

#include "rendezvous/core/restart_budget.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;

const Clock::TimePoint kDecide = Clock::TimePoint() + seconds(100);

TEST_CASE("RestartBudget: a failure with room spends one unit at once",
          "[rendezvous][budget]") {
  RestartBudget budget(2);
  RestartBudget::Pending& p = budget.Open(1, "rank 0 exited", kDecide);
  CHECK(p.charged);
  CHECK(p.round == 1);
  CHECK(p.decide_at == kDecide);
  CHECK(budget.used() == 1);
  CHECK_FALSE(budget.Blocking());  // new rounds may form meanwhile
  // No node was lost by the decision time: the charge stands.
  std::optional<RestartBudget::Pending> closed = budget.Take();
  REQUIRE(closed.has_value());
  CHECK(budget.used() == 1);
  CHECK(budget.pending() == nullptr);
}

TEST_CASE("RestartBudget: a node loss refunds the unit of its round",
          "[rendezvous][budget]") {
  RestartBudget budget(1);
  budget.Open(3, "gloo: connection reset", kDecide).waiters.push_back(7);
  REQUIRE(budget.used() == 1);
  CHECK_FALSE(budget.Refund(2).has_value());  // another round: nothing
  CHECK(budget.used() == 1);
  std::optional<RestartBudget::Pending> settled = budget.Refund(3);
  REQUIRE(settled.has_value());
  CHECK(settled->waiters == std::vector<WaiterId>{7});
  CHECK(budget.used() == 0);
  CHECK(budget.pending() == nullptr);
}

TEST_CASE("RestartBudget: without room the failure waits for its decision",
          "[rendezvous][budget]") {
  RestartBudget budget(0);
  RestartBudget::Pending& p = budget.Open(1, "rank 1 exited", kDecide);
  CHECK_FALSE(p.charged);
  CHECK(budget.used() == 0);
  CHECK(budget.Blocking());  // no new round before it is settled
  CHECK(budget.Exhausted(p.reason) ==
        "restart budget exhausted (max_restarts=0); rank 1 exited");
  // A node loss turns it into a restart, without spending anything.
  std::optional<RestartBudget::Pending> settled = budget.Refund(1);
  REQUIRE(settled.has_value());
  CHECK(budget.used() == 0);
  CHECK_FALSE(budget.Blocking());
}

TEST_CASE("RestartBudget: counts continue after a rebuild",
          "[rendezvous][budget]") {
  RestartBudget budget(3);
  budget.RaiseTo(2);
  budget.RaiseTo(1);  // never lowered by an older report
  CHECK(budget.used() == 2);
  budget.Adopt(1);  // the round the agents report, as it is
  CHECK(budget.used() == 1);
  CHECK(budget.Open(5, "x", kDecide).charged);
  CHECK(budget.used() == 2);
  // A newer failure replaces the open decision.
  budget.Open(6, "y", kDecide);
  REQUIRE(budget.pending() != nullptr);
  CHECK(budget.pending()->round == 6);
  CHECK(budget.used() == 3);
  CHECK_FALSE(budget.Open(7, "z", kDecide).charged);  // 3 of 3 spent
}

}  // namespace
}  // namespace ddprun::rendezvous
