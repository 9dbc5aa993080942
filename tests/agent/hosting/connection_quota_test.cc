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

TEST_CASE(
    "ConnectionQuota: a silent socket that came before its client's first "
    "query pairs with it (torch 1.13 without wait_for_workers)",
    "[agent][agent_store]") {
  // ddprun's C++ workers make their TCPStore clients without
  // wait_for_workers: the client connects, opens its watch socket and only
  // then sends its first query. Closing that socket made each worker's
  // listener thread spin.
  ConnectionQuota::Limits limits = Small();
  limits.max_per_host = limits.max_unidentified = limits.max_total;  // room
  ConnectionQuota q(limits);
  const TimePoint t0;
  REQUIRE(q.Admit(0, "h", t0).admitted);  // worker A's store socket
  REQUIRE(q.Admit(1, "h", t0).admitted);  // A's watch socket
  REQUIRE(q.Admit(2, "h", t0).admitted);  // worker B's store socket
  REQUIRE(q.Admit(3, "h", t0).admitted);  // B's watch socket
  q.Spoke(0, t0 + 1s);
  q.Identified(0);
  q.Spoke(2, t0 + 2s);
  q.Identified(2);
  TimePoint next;
  CHECK(q.Expire(t0 + 13s, &next).empty());  // 1 and 3 paired
  CHECK(next == TimePoint::max());
  // The silent ones never outnumber the clients.
  REQUIRE(q.Admit(4, "h", t0 + 14s).admitted);
  const std::vector<ConnectionQuota::Expired> gone = q.Expire(t0 + 24s, &next);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].id == 4);
}

}  // namespace
}  // namespace ddprun::agent
