// ChooseSuccessor on its own: which node serves an embedded rendezvous at
// its standby endpoint when the hosting agent dies.
#include "ddprun_catch.h"

#include "rendezvous/core/successor.h"
#include "tests/rendezvous/rendezvous_harness.h"

namespace ddprun::rendezvous {
namespace {

v1::NodeInfo Node(const std::string& id, const std::string& standby) {
  v1::NodeInfo n;
  n.set_node_id(id);
  n.set_standby_endpoint(standby);
  return n;
}

TEST_CASE("RendezvousSuccessor: the smallest node_id with a standby elsewhere",
          "[rendezvous][failover]") {
  const std::vector<std::string> own = {"10.0.0.1"};
  // The hosting agent's host is never chosen (its standbys die with it or
  // take its port over themselves); nodes without a standby never are.
  auto next = ChooseSuccessor(
      {Node("a", "10.0.0.1:29400"), Node("b", ""), Node("d", "10.0.0.4:29400"),
       Node("c", "10.0.0.3:29400")},
      own);
  REQUIRE(next.has_value());
  CHECK(next->node_id == "c");
  CHECK(next->endpoint == "10.0.0.3:29400");
  // The same answer whatever order the nodes come in: every node is told
  // the same successor.
  auto again = ChooseSuccessor(
      {Node("c", "10.0.0.3:29400"), Node("d", "10.0.0.4:29400")}, own);
  REQUIRE(again.has_value());
  CHECK(again->node_id == "c");
}

TEST_CASE("RendezvousSuccessor: none when every standby is on the host",
          "[rendezvous][failover]") {
  CHECK_FALSE(ChooseSuccessor({Node("a", "10.0.0.1:29400"),
                               Node("b", "[fd00::1]:29400"), Node("c", "")},
                              {"10.0.0.1", "fd00::1"})
                  .has_value());
  CHECK_FALSE(ChooseSuccessor({}, {"10.0.0.1"}).has_value());
}

TEST_CASE(
    "RendezvousSuccessor: a standby's host is compared without its port and "
    "brackets, and one that does not parse is never chosen",
    "[rendezvous][failover]") {
  const auto chosen = [](const std::string& standby,
                         const std::vector<std::string>& own) {
    return ChooseSuccessor({Node("a", standby)}, own).has_value();
  };
  CHECK_FALSE(chosen("10.0.0.3:29400", {"10.0.0.3"}));
  CHECK(chosen("10.0.0.3:29400", {"10.0.0.1"}));
  CHECK_FALSE(chosen("[fd00::3]:29400", {"fd00::3"}));
  CHECK(chosen("[fd00::3]:29400", {"fd00::1"}));
  CHECK_FALSE(chosen("node3", {"node3"}));
  CHECK(chosen("node3", {"node1"}));
  // An IPv6 address without brackets, or a bad port: not host:port.
  CHECK_FALSE(chosen("fd00::3", {"10.0.0.1"}));
  CHECK_FALSE(chosen("10.0.0.3:99999", {"10.0.0.1"}));
}

TEST_CASE(
    "RendezvousSuccessor: a job's successor is a live node, a lost one is "
    "replaced",
    "[rendezvous][failover]") {
  Harness h(1, 3);
  auto join = [&](const std::string& node, const std::string& standby) {
    v1::JoinRequest r = h.Request(node);
    r.mutable_node()->set_standby_endpoint(standby);
    REQUIRE(h.Join(r).ok());
  };
  join("a", "10.0.0.1:29400");  // on the hosting agent's host
  join("b", "10.0.0.2:29400");
  join("c", "10.0.0.3:29400");
  // At max_nodes the round completes at once.
  REQUIRE(h.Job().state() == v1::JobStatus::STATE_RUNNING);
  const std::vector<std::string> own = {"10.0.0.1"};
  auto next = h.state_.SuccessorOf("job", own);
  REQUIRE(next.has_value());
  CHECK(next->node_id == "b");
  CHECK_FALSE(h.state_.SuccessorOf("other", own).has_value());
  // b goes silent and is dropped: c is named from then on.
  for (int i = 0; i < 8; ++i) {
    h.Advance(std::chrono::milliseconds(500));
    h.Heartbeat("a");
    h.Heartbeat("c");
  }
  join("a", "10.0.0.1:29400");  // the survivors form the next round
  join("c", "10.0.0.3:29400");
  next = h.state_.SuccessorOf("job", own);
  REQUIRE(next.has_value());
  CHECK(next->node_id == "c");
  CHECK(next->endpoint == "10.0.0.3:29400");
}

TEST_CASE(
    "RendezvousSuccessor: a standby endpoint that is no host:port is "
    "refused",
    "[rendezvous][failover]") {
  Harness h(1, 2);
  v1::JoinRequest r = h.Request("a");
  r.mutable_node()->set_standby_endpoint("10.0.0.1:29400\n[forged]");
  Status s = h.Join(r);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("standby_endpoint"));
  r.mutable_node()->set_standby_endpoint(std::string(300, 'x'));
  CHECK(h.Join(r).code() == StatusCode::kInvalidArgument);
  r.mutable_node()->set_standby_endpoint("[fd00::1%eth0]:29400");
  CHECK(h.Join(r).ok());
}

}  // namespace
}  // namespace ddprun::rendezvous
