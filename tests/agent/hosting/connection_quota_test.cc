// Which connections the agent store keeps (agent/hosting/connection_quota.h):
// the policy alone, on a fixed clock, no sockets.

#include "agent/hosting/connection_quota.h"

#include "ddprun_catch.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using TimePoint = ConnectionQuota::TimePoint;

ConnectionQuota::Limits Small() {
  ConnectionQuota::Limits l;
  l.max_total = 6;
  l.max_per_host = 4;
  l.max_unidentified = 3;
  l.first_message_timeout = 10s;
  return l;
}

TEST_CASE("ConnectionQuota: a flood of silent sockets closes the oldest",
          "[agent][agent_store]") {
  ConnectionQuota q(Small());
  const TimePoint t0;
  REQUIRE(q.Admit(0, "w", t0).evict.empty());
  q.Identified(0);  // a worker, kept whatever comes
  for (uint64_t id = 1; id <= 3; ++id) {
    REQUIRE(q.Admit(id, "a", t0).evict.empty());
  }
  // The fourth unidentified closes the oldest unpaired one (1).
  ConnectionQuota::Admission a = q.Admit(4, "a", t0);
  CHECK(a.admitted);
  CHECK(a.evict == std::vector<uint64_t>{1});
  CHECK(q.unidentified() == 3);
}

TEST_CASE("ConnectionQuota: a host full of clients is refused, others are not",
          "[agent][agent_store]") {
  ConnectionQuota q(Small());
  const TimePoint t0;
  for (uint64_t id = 0; id < 4; ++id) {
    REQUIRE(q.Admit(id, "a", t0).admitted);
    q.Identified(id);
  }
  ConnectionQuota::Admission a = q.Admit(4, "a", t0);
  CHECK_FALSE(a.admitted);
  CHECK(a.refusal.find("4 connections from this host already (limit 4)") !=
        std::string::npos);
  CHECK(q.Admit(5, "b", t0).admitted);
  q.Remove(0);
  CHECK(q.Admit(6, "a", t0).admitted);  // room again
}

TEST_CASE(
    "ConnectionQuota: silent sockets expire, except one per client that "
    "was identified before it came",
    "[agent][agent_store]") {
  ConnectionQuota q(Small());
  const TimePoint t0;
  REQUIRE(q.Admit(0, "h", t0).admitted);  // silent, before any client
  REQUIRE(q.Admit(1, "h", t0).admitted);  // torch 1.13's store client
  q.Spoke(1, t0);
  q.Identified(1);
  REQUIRE(q.Admit(2, "h", t0).admitted);  // its watch socket: paired
  REQUIRE(q.Admit(3, "h", t0).admitted);  // one partner only
  TimePoint next;
  CHECK(q.Expire(t0 + 5s, &next).empty());
  CHECK(next == t0 + 10s);
  std::vector<ConnectionQuota::Expired> gone = q.Expire(t0 + 10s, &next);
  REQUIRE(gone.size() == 2);
  CHECK(gone[0].id == 0);
  CHECK(gone[0].reason == "it sent nothing within 10000 ms of connecting");
  CHECK(gone[1].id == 3);
  CHECK(next == TimePoint::max());  // the paired one has no deadline
  // When the paired socket speaks it is on its own: the timeout again.
  q.Spoke(2, t0 + 20s);
  CHECK(q.Expire(t0 + 29s, &next).empty());
  CHECK(q.Expire(t0 + 30s, &next).size() == 1);
}

}  // namespace
}  // namespace ddprun::agent
