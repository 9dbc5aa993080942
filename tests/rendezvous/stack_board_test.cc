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
  // A complete dump is joined for kMinGap (nodes dump at most that often),
  // then the next request is a new one.
  CHECK(board.Start("again", running, clock.Now()) == 1);
  clock.Advance(StackBoard::kMinGap);
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
  answer.set_instance(h.Instance("a"));
  *answer.add_ranks() = Rank(0, "stack of 0");
  auto after_a = h.state_.Stacks(answer);
  REQUIRE(after_a.ok());
  CHECK_FALSE(after_a->complete());
  CHECK(h.Heartbeat("a").stacks_request() == 0);
  CHECK(h.Heartbeat("b").stacks_request() == id);
  answer.set_node_id("b");
  answer.set_instance(h.Instance("b"));
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

// A running round of nodes a and b, and the StacksRequest by which `node`
// answers dump `id` (part `part`, `more` to follow) with `ranks`.
v1::StacksRequest Answer(Harness& h, const std::string& node, uint64_t id,
                         std::vector<v1::RankStack> ranks, uint32_t part = 0,
                         bool more = false) {
  v1::StacksRequest r;
  r.set_rdzv_id("job");
  r.set_request_id(id);
  r.set_node_id(node);
  r.set_instance(h.Instance(node));
  r.set_part(part);
  r.set_more_parts(more);
  for (v1::RankStack& rank : ranks) *r.add_ranks() = std::move(rank);
  return r;
}

uint64_t StartDump(Harness& h) {
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Answered("a"));
  v1::StacksRequest start;
  start.set_rdzv_id("job");
  auto started = h.state_.Stacks(start);
  REQUIRE(started.ok());
  return started->request_id();
}

TEST_CASE(
    "RendezvousState: only the process that joined as a node answers "
    "for it",
    "[rendezvous][stacks]") {
  // Issue 39: any caller could replace a node's stacks by naming it.
  Harness h(2, 2);
  const uint64_t id = StartDump(h);
  REQUIRE(h.state_.Stacks(Answer(h, "a", id, {Rank(0, "true stack")})).ok());
  v1::StacksRequest forged = Answer(h, "a", id, {Rank(0, "forged")});
  forged.set_instance(h.Instance("a") + 1000);
  auto before = h.state_.PeekStacks("job");
  REQUIRE(before.ok());
  CHECK(h.state_.Stacks(forged).status().code() == StatusCode::kAlreadyExists);
  forged.set_instance(0);
  CHECK(h.state_.Stacks(forged).status().code() ==
        StatusCode::kInvalidArgument);
  auto after = h.state_.PeekStacks("job");
  REQUIRE(after.ok());
  CHECK(after->SerializeAsString() == before->SerializeAsString());
  REQUIRE(after->ranks_size() == 1);
  CHECK(after->ranks(0).stack() == "true stack");
}

TEST_CASE("RendezvousState: a node answers in parts, in order",
          "[rendezvous][stacks]") {
  Harness h(2, 2);
  const uint64_t id = StartDump(h);
  REQUIRE(h.state_.Stacks(Answer(h, "a", id, {Rank(0, "x")}, 0, true)).ok());
  // Not answered until its last part: still asked, still missing.
  CHECK(h.Heartbeat("a").stacks_request() == id);
  auto out_of_order = Answer(h, "a", id, {Rank(1, "y")}, 2, false);
  CHECK(h.state_.Stacks(out_of_order).status().code() ==
        StatusCode::kFailedPrecondition);
  REQUIRE(h.state_.Stacks(Answer(h, "a", id, {Rank(1, "y")}, 1, false)).ok());
  CHECK(h.Heartbeat("a").stacks_request() == 0);
  auto done = h.state_.Stacks(Answer(h, "b", id, {Rank(2, "z")}));
  REQUIRE(done.ok());
  CHECK(done->complete());
  CHECK(done->ranks_total() == 3);
  REQUIRE(done->ranks_size() == 3);
  // Part 0 again replaces the node's answer.
  auto replaced = h.state_.Stacks(Answer(h, "a", id, {Rank(0, "x2")}));
  REQUIRE(replaced.ok());
  CHECK(replaced->ranks_total() == 2);
  CHECK(replaced->ranks(0).stack() == "x2");
  // A start cannot carry a later part.
  v1::StacksRequest start = Answer(h, "a", 0, {}, 1, false);
  CHECK(h.state_.Stacks(start).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("StackBoard: ranks come a page at a time, in rank order",
          "[rendezvous][stacks]") {
  FakeClock clock;
  StackBoard board;
  const std::vector<BoardNode> running = {{"a", "h"}, {"b", "h"}};
  const uint64_t id = board.Start("r", running, clock.Now());
  // 600 ranks of 4 KiB per node: 4.9 MB in all, above gRPC's 4 MB.
  const std::string stack(4096, 's');
  for (const char* node : {"a", "b"}) {
    std::vector<v1::RankStack> ranks;
    for (int r = 0; r < 600; ++r) {
      ranks.push_back(Rank(node[0] == 'a' ? 2 * r : 2 * r + 1, stack));
    }
    REQUIRE(board.Answer(id, node, std::move(ranks)).ok());
  }
  std::vector<int> seen;
  uint32_t from = 0;
  int pages = 0;
  while (true) {
    auto page = board.Get(id, running, from);
    REQUIRE(page.ok());
    CHECK(page->complete());
    CHECK(page->ranks_total() == 1200);
    CHECK(page->ByteSizeLong() <= StackBoard::kPageBytes + 8192);
    for (const v1::RankStack& r : page->ranks()) seen.push_back(r.rank());
    ++pages;
    if (page->ranks_next() == 0) break;
    CHECK(page->ranks_next() == from + page->ranks_size());
    from = page->ranks_next();
  }
  CHECK(pages == 5);
  REQUIRE(seen.size() == 1200);
  for (int r = 0; r < 1200; ++r) CHECK(seen[r] == r);
  // Past the end: the state only.
  auto state = board.Get(id, running, UINT32_MAX);
  REQUIRE(state.ok());
  CHECK(state->ranks_size() == 0);
  CHECK(state->ranks_total() == 1200);
}

TEST_CASE("StackBoard: a dump beyond 64 MiB names the ranks it cannot keep",
          "[rendezvous][stacks]") {
  FakeClock clock;
  StackBoard board;
  std::vector<BoardNode> running;
  const std::string stack(8000, 's');
  // 9000 ranks of 8 KB: 72 MB, beyond the bound.
  const int nodes = 18, per_node = 500;
  for (int n = 0; n < nodes; ++n) {
    running.push_back({"n" + std::to_string(n), "h"});
  }
  const uint64_t id = board.Start("r", running, clock.Now());
  for (int n = 0; n < nodes; ++n) {
    std::vector<v1::RankStack> ranks;
    for (int r = 0; r < per_node; ++r) {
      ranks.push_back(Rank(n * per_node + r, stack));
    }
    REQUIRE(board.Answer(id, running[n].node_id, std::move(ranks)).ok());
  }
  CHECK(board.bytes() <= StackBoard::kMaxBytes);
  int kept = 0, named = 0, total = 0;
  uint32_t from = 0;
  while (true) {
    auto page = board.Get(id, running, from);
    REQUIRE(page.ok());
    for (const v1::RankStack& r : page->ranks()) {
      ++total;
      if (!r.stack().empty()) {
        ++kept;
      } else {
        CHECK_THAT(r.missing(), Catch::Contains("64 MiB"));
        ++named;
      }
    }
    if (page->ranks_next() == 0) break;
    from = page->ranks_next();
  }
  CHECK(total == nodes * per_node);  // every rank is there
  CHECK(named > 0);
  CHECK(kept > 8000);
  // A node's ranks are bounded too.
  std::vector<v1::RankStack> too_many(StackBoard::kMaxRanksPerNode + 1);
  CHECK(board.Answer(id, "n0", std::move(too_many)).code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("RendezvousState: oversized rank texts are refused",
          "[rendezvous][stacks]") {
  Harness h(2, 2);
  const uint64_t id = StartDump(h);
  CHECK(h.state_.Stacks(Answer(h, "a", id, {Rank(0, std::string(8193, 'x'))}))
            .status()
            .code() == StatusCode::kInvalidArgument);
  v1::RankStack long_host = Rank(0, "x");
  long_host.set_host(std::string(300, 'h'));
  CHECK(h.state_.Stacks(Answer(h, "a", id, {long_host})).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(h.state_.Stacks(Answer(h, "a", id, {Rank(0, std::string(8192, 'x'))}))
            .ok());
}

}  // namespace
}  // namespace ddprun::rendezvous
