// ChooseSuccessor on its own: which node serves an embedded rendezvous at
// its standby endpoint when the hosting agent dies.
#include "ddprun_catch.h"

#include "rendezvous/successor.h"

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

TEST_CASE("RendezvousSuccessor: EndpointHost strips the port and brackets",
          "[rendezvous][failover]") {
  CHECK(EndpointHost("10.0.0.3:29400") == "10.0.0.3");
  CHECK(EndpointHost("[fd00::3]:29400") == "fd00::3");
  CHECK(EndpointHost("node3") == "node3");
  CHECK(EndpointHost("fd00::3") == "fd00::3");
  CHECK(EndpointHost("") == "");
}

}  // namespace
}  // namespace ddprun::rendezvous
