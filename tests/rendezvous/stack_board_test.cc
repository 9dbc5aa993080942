// Stack dumps across a job's nodes (the Stacks rpc): the board's rules and
// RendezvousState's heartbeats that hand a dump to the nodes. FakeClock, no
// gRPC.
#include "ddprun_catch.h"

#include <string>

#include "common/clock.h"
#include "rendezvous/core/rendezvous_state.h"
#include "rendezvous/core/stack_board.h"
#include "tests/rendezvous/rendezvous_harness.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;

v1::RankStack Rank(int rank, const std::string& stack) {
  v1::RankStack r;
  r.set_rank(rank);
  r.set_pid(100 + rank);
  r.set_stack(stack);
  return r;
}

TEST_CASE("StackBoard: a dump completes once every running node answered",
          "[rendezvous][stacks]") {
  FakeClock clock;
  StackBoard board;
  const std::vector<BoardNode> running = {{"a", "10.0.0.1"},
                                          {"b", "10.0.0.2"}};
  const uint64_t id = board.Start("watchdog on node 0", running, clock.Now());
  CHECK(id == 1);
  std::string reason;
  CHECK(board.PendingFor("a", clock.Now(), &reason) == 1);
  CHECK(reason == "watchdog on node 0");
  REQUIRE(board.Answer(id, "a", {Rank(1, "x"), Rank(0, "y")}).ok());
  CHECK(board.PendingFor("a", clock.Now(), nullptr) == 0);
  CHECK(board.PendingFor("b", clock.Now(), nullptr) == 1);
  auto half = board.Get(id, running);
  REQUIRE(half.ok());
  CHECK_FALSE(half->complete());
  REQUIRE(half->missing_nodes_size() == 1);
  CHECK(half->missing_nodes(0) == "b (10.0.0.2)");
  // A second request meanwhile joins the one under way.
  CHECK(board.Start("watchdog on node 1", running, clock.Now()) == id);
  REQUIRE(board.Answer(id, "b", {Rank(2, "z")}).ok());
  auto full = board.Get(id, running);
  REQUIRE(full.ok());
  CHECK(full->complete());
  REQUIRE(full->ranks_size() == 3);
  CHECK(full->ranks(0).rank() == 0);  // sorted by rank
  CHECK(full->ranks(2).stack() == "z");
  CHECK(full->reason() == "watchdog on node 0");
  // A complete dump is not joined: the next request is a new one.
  CHECK(board.Start("again", running, clock.Now()) == 2);
  CHECK(board.Answer(1, "a", {}).code() == StatusCode::kNotFound);
  CHECK(board.Get(1, running).status().code() == StatusCode::kNotFound);
}

TEST_CASE("StackBoard: nodes are asked for 10 s, then a new dump starts",
          "[rendezvous][stacks]") {
  FakeClock clock;
  StackBoard board;
  const std::vector<BoardNode> running = {{"a", "h"}, {"b", "h"}};
  CHECK(board.PendingFor("a", clock.Now(), nullptr) == 0);  // none yet
  REQUIRE(board.Start("r", running, clock.Now()) == 1);
  clock.Advance(StackBoard::kAskWindow - std::chrono::milliseconds(1));
  CHECK(board.PendingFor("b", clock.Now(), nullptr) == 1);
  CHECK(board.Start("r", running, clock.Now()) == 1);
  clock.Advance(std::chrono::milliseconds(1));
  CHECK(board.PendingFor("b", clock.Now(), nullptr) == 0);
  CHECK(board.Start("r", running, clock.Now()) == 2);
}

TEST_CASE("RendezvousState: Stacks asks every running node in its heartbeat",
          "[rendezvous][stacks]") {
  Harness h(2, 2);
  v1::StacksRequest start;
  start.set_rdzv_id("job");
  start.set_reason("operator");
  // No job, then no running round: clear errors, no dump.
  CHECK(h.state_.Stacks(start).status().code() == StatusCode::kNotFound);
  REQUIRE(h.Join("a").ok());
  CHECK(h.state_.Stacks(start).status().code() ==
        StatusCode::kFailedPrecondition);
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Answered("a"));
  CHECK(h.Heartbeat("a").stacks_request() == 0);
  auto started = h.state_.Stacks(start);
  REQUIRE(started.ok());
  const uint64_t id = started->request_id();
  CHECK(id != 0);
  CHECK_FALSE(started->complete());
  CHECK(started->missing_nodes_size() == 2);
  v1::HeartbeatResponse beat = h.Heartbeat("a");
  CHECK(beat.stacks_request() == id);
  CHECK(beat.stacks_reason() == "operator");
  CHECK(beat.action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  // Node a answers; its heartbeats stop asking, b's go on.
  v1::StacksRequest answer;
  answer.set_rdzv_id("job");
  answer.set_request_id(id);
  answer.set_node_id("a");
  *answer.add_ranks() = Rank(0, "stack of 0");
  auto after_a = h.state_.Stacks(answer);
  REQUIRE(after_a.ok());
  CHECK_FALSE(after_a->complete());
  CHECK(h.Heartbeat("a").stacks_request() == 0);
  CHECK(h.Heartbeat("b").stacks_request() == id);
  answer.set_node_id("b");
  answer.clear_ranks();
  *answer.add_ranks() = Rank(1, "stack of 1");
  auto done = h.state_.Stacks(answer);
  REQUIRE(done.ok());
  CHECK(done->complete());
  REQUIRE(done->ranks_size() == 2);
  CHECK(done->ranks(1).stack() == "stack of 1");
  // A poll (no node) sees the same; bad requests change nothing.
  v1::StacksRequest poll;
  poll.set_rdzv_id("job");
  poll.set_request_id(id);
  auto polled = h.state_.Stacks(poll);
  REQUIRE(polled.ok());
  CHECK(polled->complete());
  v1::StacksRequest stranger = answer;
  stranger.set_node_id("nobody");
  CHECK(h.state_.Stacks(stranger).status().code() == StatusCode::kNotFound);
  v1::StacksRequest anonymous = answer;
  anonymous.clear_node_id();
  CHECK(h.state_.Stacks(anonymous).status().code() ==
        StatusCode::kInvalidArgument);
  v1::StacksRequest long_reason = start;
  long_reason.set_reason(std::string(300, 'x'));
  CHECK(h.state_.Stacks(long_reason).status().code() ==
        StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ddprun::rendezvous
