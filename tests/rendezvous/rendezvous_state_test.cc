// The rendezvous state machine, driven by a FakeClock: no gRPC, no sleeps.
// The first cases mirror the rows of torch's c10d join table
// (_RendezvousJoinOp, reference/torchrun-contract.md section 3).
#include "ddprun_catch.h"

#include <functional>
#include <map>
#include <string>

#include "common/clock.h"
#include "rendezvous/core/rendezvous_state.h"
#include "tests/rendezvous/rendezvous_harness.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Action = v1::HeartbeatResponse;

TEST_CASE("RendezvousState: complete at max at once", "[rendezvous]") {
  Harness h(2, 3);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  CHECK_FALSE(h.Answered("a"));
  REQUIRE(h.Join("c").ok());
  for (const char* n : {"a", "b", "c"}) {
    REQUIRE(h.Answered(n));
    CHECK(h.Answer(n).status.ok());
    CHECK(h.Of(n).round() == 1);
    CHECK(h.Of(n).group_world_size() == 3);
    CHECK(h.Of(n).world_size() == 3);
  }
  // Ranks are a permutation; lowest free in join order.
  CHECK(h.Of("a").group_rank() == 0);
  CHECK(h.Of("b").group_rank() == 1);
  CHECK(h.Of("c").group_rank() == 2);
  // MASTER_ADDR/PORT come from group rank 0's join request.
  CHECK(h.Of("c").master_addr() == h.Request("a").node().addr());
  CHECK(h.Of("c").master_port() ==
        static_cast<int>(h.Request("a").node().master_port()));
  CHECK(h.Job().state() == v1::JobStatus::STATE_RUNNING);
}

TEST_CASE("RendezvousState: on_round_complete runs before the round's answers",
          "[rendezvous]") {
  // The agent store (agent/hosting/agent_store.h) empties itself here: no
  // worker of the round may start before that, so no Join may be answered
  // yet.
  std::vector<std::pair<std::string, int64_t>> seen;
  const Harness* harness = nullptr;
  bool answered_before = false;
  JobDefaults d;
  d.on_round_complete = [&](const std::string& job, int64_t round) {
    seen.emplace_back(job, round);
    answered_before = harness->Answered("a") || harness->Answered("b");
  };
  Harness h(2, 2, 1, d);
  harness = &h;
  REQUIRE(h.Join("a").ok());
  CHECK(seen.empty());
  REQUIRE(h.Join("b").ok());
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::make_pair(std::string("job"), int64_t{1}));
  CHECK_FALSE(answered_before);
  CHECK(h.Answered("a"));
  CHECK(h.Answered("b"));
}

TEST_CASE("RendezvousState: complete at min after last call", "[rendezvous]") {
  Harness h(2, 4);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  h.Advance(milliseconds(4999));
  CHECK_FALSE(h.Answered("a"));
  CHECK(h.Job().state() == v1::JobStatus::STATE_OPEN);
  REQUIRE(h.state_.NextDeadline().has_value());
  h.Advance(milliseconds(1));
  REQUIRE(h.Answered("a"));
  CHECK(h.Of("a").group_world_size() == 2);
  CHECK(h.Of("b").group_world_size() == 2);
}

TEST_CASE("RendezvousState: below min waits past last call", "[rendezvous]") {
  Harness h(3, 4);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  h.Advance(seconds(30));
  CHECK_FALSE(h.Answered("a"));
}

TEST_CASE("RendezvousState: past the join deadline the job fails",
          "[rendezvous]") {
  Harness h(3, 3);
  REQUIRE(h.Join("a").ok());
  h.Advance(seconds(59));
  CHECK_FALSE(h.Answered("a"));
  h.Advance(seconds(1));
  REQUIRE(h.Answered("a"));
  CHECK(h.Answer("a").status.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(h.Answer("a").status.message(),
             Catch::Contains("did not reach min_nodes=3"));
  CHECK(h.Job().state() == v1::JobStatus::STATE_FAILED);
  // Its node retrying gets a clear error instead of hanging.
  Status late = h.Join("a");
  CHECK(late.code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("RendezvousState: closed job refuses joins", "[rendezvous]") {
  Harness h(1, 2);
  v1::CloseRequest close;
  close.set_rdzv_id("job");
  CHECK(h.state_.Close(close).code() == StatusCode::kNotFound);
  REQUIRE(h.Join("a").ok());
  close.set_succeeded(false);
  close.set_reason("operator stop");
  REQUIRE(h.state_.Close(close).ok());
  h.Advance(Clock::Duration::zero());  // collects the answers
  REQUIRE(h.Answered("a"));
  CHECK(h.Answer("a").status.code() == StatusCode::kAborted);
  Status s = h.Join("a");
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(s.message(), Catch::Contains("closed"));
  CHECK(h.Heartbeat("a").action() == Action::ACTION_JOB_FAILED);
  // A straggler that ran a round of the job is refused too.
  v1::JoinRequest straggler = h.Request("c");
  straggler.mutable_previous()->set_round(1);
  CHECK(h.Join(straggler).code() == StatusCode::kFailedPrecondition);
  CHECK(h.Job().state() == v1::JobStatus::STATE_FAILED);
}

TEST_CASE(
    "RendezvousState: a fresh launch reusing a finished rdzv_id starts "
    "a new job",
    "[rendezvous]") {
  Harness h(1, 1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Succeed("a").ok());
  REQUIRE(h.Job().state() == v1::JobStatus::STATE_SUCCEEDED);
  v1::JoinRequest fresh = h.Request("b");
  fresh.mutable_config()->set_max_nodes(2);  // a new job may differ
  REQUIRE(h.Join(fresh).ok());
  CHECK(h.Job().state() == v1::JobStatus::STATE_OPEN);
  CHECK(h.Job().round() == 1);
  CHECK(h.Job().config().max_nodes() == 2);
  // A refused fresh join leaves the finished job in place.
  Harness k(1, 1);
  REQUIRE(k.Join("a").ok());
  REQUIRE(k.Succeed("a").ok());
  v1::JoinRequest bad = k.Request("b");
  bad.mutable_node()->set_local_world_size(0);
  CHECK(k.Join(bad).code() == StatusCode::kInvalidArgument);
  CHECK(k.Job().state() == v1::JobStatus::STATE_SUCCEEDED);
}

TEST_CASE("RendezvousState: a job every agent left is forgotten",
          "[rendezvous]") {
  Harness h(2, 2);
  REQUIRE(h.Join("a").ok());  // waiter 1
  h.state_.CancelWaiter(1);   // the agent went away
  h.Advance(seconds(1));
  CHECK(h.state_.job_count() == 0);
  REQUIRE(h.Join("b").ok());  // a later launch starts afresh
  CHECK(h.Job().nodes_size() == 1);
}

TEST_CASE("RendezvousState: complete and participant gets its assignment",
          "[rendezvous]") {
  Harness h(2, 2);
  REQUIRE(h.Join("a").ok());
  v1::JoinRequest retry = h.Request("b");  // previous: none
  REQUIRE(h.Join("b").ok());
  const v1::Assignment first = h.Of("b");
  h.ForgetAnswers();
  // The answer was lost; the same Join again returns the same assignment.
  REQUIRE(h.Join(retry).ok());
  REQUIRE(h.Answered("b"));
  CHECK(h.Answer("b").assignment.SerializeAsString() ==
        first.SerializeAsString());
  CHECK(h.Heartbeat("a").action() == Action::ACTION_CONTINUE);
}

TEST_CASE("RendezvousState: complete and full parks a spare", "[rendezvous]") {
  Harness h(1, 2);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Join("c").ok());
  CHECK_FALSE(h.Answered("c"));
  // The running round is full: nobody is asked to restart.
  auto hb = h.Heartbeat("a");
  CHECK(hb.action() == Action::ACTION_CONTINUE);
  CHECK(hb.nodes_waiting() == 1);
  // When a node is lost, the spare takes its place in the next round.
  h.Advance(seconds(2));
  h.Heartbeat("a");
  h.Advance(milliseconds(1500));  // b silent for 3.5 s
  auto after = h.Heartbeat("a");
  CHECK(after.action() == Action::ACTION_REJOIN);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Answered("c"));
  CHECK(h.Of("c").round() == 2);
  CHECK(h.Of("c").group_world_size() == 2);
  CHECK(h.Of("a").group_rank() == 0);  // returning node keeps its rank
  CHECK(h.Of("c").group_rank() == 1);
}

TEST_CASE("RendezvousState: a spare ends well when the job succeeds",
          "[rendezvous]") {
  Harness h(1, 1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("spare").ok());  // the round is full: it waits
  CHECK_FALSE(h.Answered("spare"));
  REQUIRE(h.Succeed("a").ok());
  CHECK(h.Job().state() == v1::JobStatus::STATE_SUCCEEDED);
  // Not an error: the job is done and needs no more nodes.
  REQUIRE(h.Answered("spare"));
  CHECK(h.Answer("spare").status.ok());
  CHECK(h.Answer("spare").job_succeeded);
  CHECK(h.Answer("spare").assignment.round() == 0);
  CHECK_FALSE(h.Answer("a").job_succeeded);  // a's Join got its round
  // The spare's answer was lost: its retried Join gets the same one.
  h.ForgetAnswers();
  REQUIRE(h.Join("spare").ok());
  REQUIRE(h.Answered("spare"));
  CHECK(h.Answer("spare").job_succeeded);
  // A node of the finished round that joins again is told the job is closed.
  CHECK(h.Join("a").code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("RendezvousState: late joiner scales up without spending budget",
          "[rendezvous]") {
  Harness h(1, 3, /*max_restarts=*/0);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  h.Advance(seconds(5));
  REQUIRE(h.Of("a").group_world_size() == 2);
  h.ForgetAnswers();
  REQUIRE(h.Join("c").ok());
  CHECK_FALSE(h.Answered("c"));
  auto hb = h.Heartbeat("a");
  CHECK(hb.action() == Action::ACTION_REJOIN);
  CHECK_THAT(hb.reason(), Catch::Contains("'c' is waiting"));
  CHECK(h.Heartbeat("b").action() == Action::ACTION_REJOIN);
  REQUIRE(h.Join("b").ok());
  CHECK_FALSE(h.Answered("b"));  // a is still expected
  REQUIRE(h.Join("a").ok());     // all known nodes back: completes at once
  for (const char* n : {"a", "b", "c"}) {
    CHECK(h.Of(n).round() == 2);
    CHECK(h.Of(n).group_world_size() == 3);
    CHECK(h.Of(n).restart_count() == 0);
  }
  CHECK(h.Of("a").group_rank() == 0);
  CHECK(h.Of("b").group_rank() == 1);
  CHECK(h.Of("c").group_rank() == 2);
}

TEST_CASE("RendezvousState: node loss re-forms a smaller round",
          "[rendezvous]") {
  Harness h(2, 3);
  for (const char* n : {"a", "b", "c"}) REQUIRE(h.Join(n).ok());
  h.Advance(seconds(1));
  h.Heartbeat("a");
  h.Heartbeat("c");
  h.Advance(seconds(1));
  h.Heartbeat("a");
  h.Heartbeat("c");
  CHECK(h.Job().state() == v1::JobStatus::STATE_RUNNING);
  h.Advance(milliseconds(1001));  // b silent for 3.001 s
  CHECK(h.Job().state() == v1::JobStatus::STATE_OPEN);
  auto hb = h.Heartbeat("a");
  CHECK(hb.action() == Action::ACTION_REJOIN);
  CHECK_THAT(hb.reason(),
             Catch::Contains("'b'") && Catch::Contains("no heartbeat"));
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("c").ok());
  CHECK(h.Of("a").round() == 2);
  CHECK(h.Of("a").group_world_size() == 2);
  // The dropped node, if it was only partitioned, is told to re-join.
  CHECK(h.Heartbeat("b").action() == Action::ACTION_REJOIN);
}

TEST_CASE("RendezvousState: restart budget is job-global", "[rendezvous]") {
  Harness h(2, 2, /*max_restarts=*/1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Answered("a/failure"));  // budget left: answered at once
  CHECK(h.Answer("a/failure").failure.will_restart());
  CHECK(h.Answer("a/failure").failure.restart_count() == 1);
  // b's workers fail in the same round: the budget is not spent twice.
  REQUIRE(h.Fail("b").ok());
  REQUIRE(h.Answered("b/failure"));
  CHECK(h.Answer("b/failure").failure.will_restart());
  CHECK(h.Answer("b/failure").failure.restart_count() == 1);
  CHECK(h.Heartbeat("b").action() == Action::ACTION_RESTART);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  // TORCHELASTIC_RESTART_COUNT is the same on every node.
  CHECK(h.Of("a").restart_count() == 1);
  CHECK(h.Of("b").restart_count() == 1);
  h.ForgetAnswers();
  REQUIRE(h.Fail("b").ok());
  // Budget spent: the answer waits for a possible node loss...
  CHECK_FALSE(h.Answered("b/failure"));
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  CHECK_FALSE(h.Answered("a"));  // ...and no new round starts meanwhile
  h.Advance(seconds(3));
  CHECK_FALSE(h.Answered("b/failure"));
  h.Advance(milliseconds(500));  // heartbeat_timeout + 0.5 s: nobody lost
  REQUIRE(h.Answered("b/failure"));
  CHECK_FALSE(h.Answer("b/failure").failure.will_restart());
  REQUIRE(h.Answered("a"));
  CHECK(h.Answer("a").status.code() == StatusCode::kAborted);
  auto hb = h.Heartbeat("a");
  CHECK(hb.action() == Action::ACTION_JOB_FAILED);
  CHECK_THAT(hb.reason(), Catch::Contains("restart budget exhausted"));
}

TEST_CASE("RendezvousState: a one-node round fails at once without budget",
          "[rendezvous]") {
  // --standalone: nobody else can be lost, so no waiting for heartbeats.
  Harness h(1, 1, /*max_restarts=*/1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Answered("a/failure"));
  CHECK(h.Answer("a/failure").failure.will_restart());
  REQUIRE(h.Join("a").ok());
  CHECK(h.Of("a").restart_count() == 1);
  h.ForgetAnswers();
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Answered("a/failure"));  // no clock advance needed
  CHECK_FALSE(h.Answer("a/failure").failure.will_restart());
  CHECK(h.Job().state() == v1::JobStatus::STATE_FAILED);
}

TEST_CASE("RendezvousState: a failure caused by a node loss spends no budget",
          "[rendezvous]") {
  Harness h(2, 3, /*max_restarts=*/0);
  for (const char* n : {"a", "b", "c"}) REQUIRE(h.Join(n).ok());
  h.Advance(seconds(1));
  h.Heartbeat("a");
  h.Heartbeat("b");
  // c dies; a's collectives break at once, before c's heartbeats are missed.
  REQUIRE(h.Fail("a").ok());
  CHECK_FALSE(h.Answered("a/failure"));
  CHECK(h.Heartbeat("b").action() == Action::ACTION_RESTART);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  h.Advance(seconds(1));
  CHECK_FALSE(h.Answered("a/failure"));
  h.Advance(milliseconds(1001));  // c silent for 3.001 s: lost
  REQUIRE(h.Answered("a/failure"));
  CHECK(h.Answer("a/failure").failure.will_restart());
  REQUIRE(h.Answered("b"));
  CHECK(h.Of("b").round() == 2);
  CHECK(h.Of("b").group_world_size() == 2);
  CHECK(h.Of("b").restart_count() == 0);
  CHECK(h.Job().state() == v1::JobStatus::STATE_RUNNING);
}

TEST_CASE(
    "RendezvousState: a node lost after the next round formed still "
    "refunds the restart",
    "[rendezvous]") {
  // last_call_timeout (1 s) < heartbeat_timeout (3 s): the survivors' round
  // completes before the dead node's heartbeats expire.
  Harness h(2, 3, /*max_restarts=*/1);
  h.config_.set_last_call_timeout_ms(1000);
  for (const char* n : {"a", "b", "c"}) REQUIRE(h.Join(n).ok());
  h.Advance(milliseconds(500));
  h.Heartbeat("a");
  h.Heartbeat("b");
  h.Heartbeat("c");
  // c dies now; a's collectives break at once.
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Answered("a/failure"));
  CHECK(h.Answer("a/failure").failure.will_restart());
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  h.Advance(milliseconds(1100));  // last call: a and b form round 2
  REQUIRE(h.Answered("b"));
  CHECK(h.Of("b").round() == 2);
  CHECK(h.Of("b").group_world_size() == 2);
  for (int i = 0; i < 30; ++i) {  // c silent for 3 s: it was c's loss
    h.Advance(milliseconds(100));
    h.Heartbeat("a");
    h.Heartbeat("b");
  }
  CHECK(h.Job().restart_count() == 0);
  // The refunded unit is there for a real worker failure.
  h.ForgetAnswers();
  REQUIRE(h.Fail("b").ok());
  REQUIRE(h.Answered("b/failure"));
  CHECK(h.Answer("b/failure").failure.will_restart());
}

TEST_CASE(
    "RendezvousState: a slow but alive node left out of a round keeps "
    "the charge",
    "[rendezvous]") {
  Harness h(2, 3, /*max_restarts=*/1);
  h.config_.set_last_call_timeout_ms(1000);
  for (const char* n : {"a", "b", "c"}) REQUIRE(h.Join(n).ok());
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  h.Advance(milliseconds(1100));
  REQUIRE(h.Answered("b"));
  for (int i = 0; i < 40; ++i) {  // c still stopping its workers, alive
    h.Advance(milliseconds(100));
    h.Heartbeat("a");
    h.Heartbeat("b");
    (void)h.TryHeartbeat("c");
  }
  CHECK(h.Job().restart_count() == 1);
  h.ForgetAnswers();
  REQUIRE(h.Fail("b").ok());
  for (int i = 0; i < 36 && !h.Answered("b/failure"); ++i) {
    h.Advance(milliseconds(100));
    h.Heartbeat("a");
    h.Heartbeat("b");
  }
  REQUIRE(h.Answered("b/failure"));
  CHECK_FALSE(h.Answer("b/failure").failure.will_restart());
}

TEST_CASE("RendezvousState: a node loss refunds a spent restart",
          "[rendezvous]") {
  Harness h(2, 3, /*max_restarts=*/1);
  for (const char* n : {"a", "b", "c"}) REQUIRE(h.Join(n).ok());
  h.Advance(seconds(2));
  h.Heartbeat("a");
  h.Heartbeat("b");
  REQUIRE(h.Fail("b").ok());
  REQUIRE(h.Answered("b/failure"));
  CHECK(h.Answer("b/failure").failure.restart_count() == 1);
  h.Advance(milliseconds(1001));  // c lost
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  CHECK(h.Of("a").round() == 2);
  CHECK(h.Of("a").restart_count() == 0);
  CHECK(h.Job().restart_count() == 0);
}

TEST_CASE("RendezvousState: exit barrier waits for every node",
          "[rendezvous]") {
  Harness h(2, 2);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Succeed("a").ok());
  CHECK_FALSE(h.Answered("a/success"));
  for (int i = 0; i < 5; ++i) {  // a succeeded: no heartbeat needed any more
    h.Advance(seconds(2));
    h.Heartbeat("b");
  }
  CHECK_FALSE(h.Answered("a/success"));
  REQUIRE(h.Succeed("b").ok());
  REQUIRE(h.Answered("a/success"));
  CHECK(h.Answer("a/success").status.ok());
  CHECK(h.Answer("b/success").status.ok());
  CHECK(h.Job().state() == v1::JobStatus::STATE_SUCCEEDED);
}

TEST_CASE("RendezvousState: node_rank hints honoured when unique",
          "[rendezvous]") {
  Harness h(3, 3);
  REQUIRE(h.Join("a", 1, 2).ok());
  REQUIRE(h.Join("b", 1, 0).ok());
  REQUIRE(h.Join("c", 1, -1).ok());
  CHECK(h.Of("a").group_rank() == 2);
  CHECK(h.Of("b").group_rank() == 0);
  CHECK(h.Of("c").group_rank() == 1);
  CHECK(h.Of("a").master_addr() == h.Request("b").node().addr());

  Harness dup(2, 2);
  REQUIRE(dup.Join("x", 1, 1).ok());
  REQUIRE(dup.Join("y", 1, 1).ok());  // same hint: neither is honoured
  CHECK(dup.Of("x").group_rank() == 0);
  CHECK(dup.Of("y").group_rank() == 1);
}

TEST_CASE("RendezvousState: rank offsets are prefix sums of nproc",
          "[rendezvous]") {
  Harness h(3, 3);
  REQUIRE(h.Join(h.Request("a", 4, -1, "trainer")).ok());
  REQUIRE(h.Join(h.Request("b", 2, -1, "reader")).ok());
  REQUIRE(h.Join(h.Request("c", 8, -1, "trainer")).ok());
  CHECK(h.Of("a").rank_offset() == 0);
  CHECK(h.Of("b").rank_offset() == 4);
  CHECK(h.Of("c").rank_offset() == 6);
  for (const char* n : {"a", "b", "c"}) CHECK(h.Of(n).world_size() == 14);
  CHECK(h.Of("a").role_rank_offset() == 0);
  CHECK(h.Of("c").role_rank_offset() == 4);
  CHECK(h.Of("a").role_world_size() == 12);
  CHECK(h.Of("b").role_rank_offset() == 0);
  CHECK(h.Of("b").role_world_size() == 2);
}

TEST_CASE("RendezvousState: config mismatch is refused without state change",
          "[rendezvous]") {
  Harness h(2, 4);
  REQUIRE(h.Join("a").ok());
  v1::JoinRequest other = h.Request("b");
  other.mutable_config()->set_min_nodes(1);
  Status s = h.Join(other);
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(s.message(), Catch::Contains("2:4") && Catch::Contains("1:4"));
  CHECK(h.Job().nodes_size() == 1);
}

TEST_CASE("RendezvousState: node id used by another process is refused",
          "[rendezvous]") {
  Harness h(2, 2);
  REQUIRE(h.Join("a").ok());
  v1::JoinRequest imposter = h.Request("a");
  imposter.mutable_node()->set_instance(9999);
  Status s = h.Join(imposter);
  CHECK(s.code() == StatusCode::kAlreadyExists);
  CHECK(h.Job().nodes_size() == 1);
  CHECK_FALSE(h.Answered("a"));
}

TEST_CASE("RendezvousState: bad input gets a clear error", "[rendezvous]") {
  Harness h(1, 1);
  v1::JoinRequest r = h.Request("a");
  r.mutable_node()->set_local_world_size(0);
  CHECK(h.Join(r).code() == StatusCode::kInvalidArgument);
  r = h.Request("a");
  r.set_rdzv_id("");
  CHECK_THAT(h.Join(r).message(), Catch::Contains("rdzv_id is empty"));
  r = h.Request("a");
  r.mutable_config()->set_max_nodes(0);
  CHECK(h.Join(r).code() == StatusCode::kInvalidArgument);
  auto st = h.state_.GetStatus("nope");
  CHECK(st.status().code() == StatusCode::kNotFound);
  CHECK(h.state_.job_count() == 0);
}

TEST_CASE("RendezvousState: a cancelled joiner leaves the open round",
          "[rendezvous]") {
  Harness h(2, 2);
  REQUIRE(h.Join("a").ok());  // waiter 1
  h.state_.CancelWaiter(1);
  REQUIRE(h.Join("b").ok());
  CHECK_FALSE(h.Answered("b"));  // a is gone: b waits for a second node
  CHECK(h.Job().nodes_size() == 1);
}

TEST_CASE("RendezvousState: leave invalidates the running round",
          "[rendezvous]") {
  Harness h(1, 2);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  v1::LeaveRequest leave;
  leave.set_rdzv_id("job");
  leave.set_node_id("b");
  leave.set_instance(h.Request("b").node().instance());
  REQUIRE(h.state_.Leave(leave).ok());
  CHECK(h.Heartbeat("a").action() == Action::ACTION_REJOIN);
  REQUIRE(h.Join("a").ok());  // the only known node: completes at once
  CHECK(h.Of("a").round() == 2);
  CHECK(h.Of("a").group_world_size() == 1);
}

TEST_CASE(
    "RendezvousState: a restarted server rebuilds the job from "
    "heartbeats",
    "[rendezvous]") {
  Harness h(2, 2, /*max_restarts=*/3);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Answer("a/failure").failure.will_restart());
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Of("a").round() == 2);

  // A fresh server (empty state) with the same agents.
  Harness fresh(2, 2, 3);
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = h.config_;
  for (const char* n : {"a", "b"}) {
    *hb.mutable_node() = h.Request(n).node();
    *hb.mutable_current() = h.Of(n);
    auto reply = fresh.state_.Heartbeat(hb);
    REQUIRE(reply.ok());
    CHECK(reply->action() == Action::ACTION_CONTINUE);
  }
  v1::JobStatus job = fresh.Job();
  CHECK(job.state() == v1::JobStatus::STATE_RUNNING);
  CHECK(job.round() == 2);
  CHECK(job.restart_count() == 1);
  CHECK(job.nodes_size() == 2);
  // The rebuilt job keeps working: the next failure spends the next unit.
  v1::ReportFailureRequest fail;
  fail.set_rdzv_id("job");
  fail.set_node_id("b");
  fail.set_instance(h.Request("b").node().instance());
  fail.set_round(2);
  REQUIRE(fresh.state_.ReportFailure(fail, /*waiter=*/77).ok());
  std::vector<Outcome> outcomes = fresh.state_.TakeOutcomes();
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].waiter == 77);
  CHECK(outcomes[0].failure.restart_count() == 2);
}

TEST_CASE(
    "RendezvousState: after a failover, a survivor's failure is put down to "
    "the node that never re-registered",
    "[rendezvous]") {
  // a hosted the server and died with it; b's workers failed with a's.
  Harness h(1, 2, /*max_restarts=*/3);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  Harness fresh(1, 2, 3);  // the server b now hosts: empty
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = h.config_;
  *hb.mutable_node() = h.Request("b").node();
  *hb.mutable_current() = h.Of("b");
  REQUIRE(fresh.state_.Heartbeat(hb).ok());  // b re-registers round 1
  v1::ReportFailureRequest fail;
  fail.set_rdzv_id("job");
  fail.set_node_id("b");
  fail.set_instance(h.Request("b").node().instance());
  fail.set_round(1);
  REQUIRE(fresh.state_.ReportFailure(fail, /*waiter=*/77).ok());
  std::vector<Outcome> outcomes = fresh.state_.TakeOutcomes();
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].failure.will_restart());
  // b re-joins at once; the round waits for a until heartbeat_timeout (it
  // might be alive and re-register), then forms without it and refunds
  // the restart: a node loss spends no budget.
  v1::JoinRequest join = h.Request("b");
  REQUIRE(fresh.state_.Join(join, /*waiter=*/78).ok());
  CHECK(fresh.state_.TakeOutcomes().empty());
  fresh.Advance(milliseconds(2900));
  CHECK_FALSE(fresh.Answered("b"));
  CHECK(fresh.Job().state() == v1::JobStatus::STATE_OPEN);
  fresh.clock_.Advance(milliseconds(200));
  fresh.state_.Tick();
  outcomes = fresh.state_.TakeOutcomes();
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].waiter == 78);
  CHECK(outcomes[0].assignment.round() == 2);
  CHECK(outcomes[0].assignment.group_world_size() == 1);
  CHECK(outcomes[0].assignment.restart_count() == 0);
  CHECK(fresh.Job().restart_count() == 0);
}

TEST_CASE(
    "RendezvousState: a rebuilt round succeeds only once every node is back",
    "[rendezvous]") {
  Harness h(2, 2);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  Harness fresh(2, 2);  // a restarted server; b still trains
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = h.config_;
  *hb.mutable_node() = h.Request("a").node();
  *hb.mutable_current() = h.Of("a");
  REQUIRE(fresh.state_.Heartbeat(hb).ok());  // a, in its exit barrier
  v1::ReportSuccessRequest done;
  done.set_rdzv_id("job");
  done.set_node_id("a");
  done.set_instance(h.Request("a").node().instance());
  done.set_round(1);
  REQUIRE(fresh.state_.ReportSuccess(done, /*waiter=*/91).ok());
  // Not "all 1 nodes succeeded": b has not re-registered yet.
  CHECK(fresh.state_.TakeOutcomes().empty());
  CHECK(fresh.Job().state() == v1::JobStatus::STATE_RUNNING);
  *hb.mutable_node() = h.Request("b").node();
  *hb.mutable_current() = h.Of("b");
  REQUIRE(fresh.state_.Heartbeat(hb).ok());
  CHECK(fresh.state_.TakeOutcomes().empty());
  done.set_node_id("b");
  done.set_instance(h.Request("b").node().instance());
  REQUIRE(fresh.state_.ReportSuccess(done, /*waiter=*/92).ok());
  std::vector<Outcome> outcomes = fresh.state_.TakeOutcomes();
  REQUIRE(outcomes.size() == 2);
  CHECK(outcomes[0].status.ok());
  CHECK(outcomes[1].status.ok());
  CHECK(fresh.Job().state() == v1::JobStatus::STATE_SUCCEEDED);
}

TEST_CASE(
    "RendezvousState: a failure that is not retried fails the job at once",
    "[rendezvous]") {
  Harness h(2, 2, /*max_restarts=*/3);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  v1::ReportFailureRequest fail;
  fail.set_rdzv_id("job");
  fail.set_node_id("b");
  fail.set_instance(h.Request("b").node().instance());
  fail.set_round(1);
  fail.set_reason("exit code 2 (usage error)");
  fail.set_no_retry(true);
  REQUIRE(h.state_.ReportFailure(fail, /*waiter=*/55).ok());
  std::vector<Outcome> outcomes = h.state_.TakeOutcomes();
  REQUIRE(outcomes.size() == 1);
  CHECK_FALSE(outcomes[0].failure.will_restart());
  CHECK(outcomes[0].failure.restart_count() == 0);  // no budget spent
  v1::JobStatus job = h.Job();
  CHECK(job.state() == v1::JobStatus::STATE_FAILED);
  CHECK_THAT(job.reason(), Catch::Contains("not retried"));
  CHECK(h.Heartbeat("a").action() == Action::ACTION_JOB_FAILED);
}

TEST_CASE("RendezvousState: rebuild with a missing node re-forms the round",
          "[rendezvous]") {
  Harness h(1, 2);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Of("a").group_world_size() == 2);
  Harness fresh(1, 2);
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = h.config_;
  *hb.mutable_node() = h.Request("a").node();
  *hb.mutable_current() = h.Of("a");
  REQUIRE(fresh.state_.Heartbeat(hb).ok());
  fresh.Advance(seconds(2));
  REQUIRE(fresh.state_.Heartbeat(hb).ok());
  fresh.Advance(milliseconds(1001));  // b never re-registers
  CHECK(fresh.Job().state() == v1::JobStatus::STATE_OPEN);
  auto reply = fresh.state_.Heartbeat(hb);
  REQUIRE(reply.ok());
  CHECK(reply->action() == Action::ACTION_REJOIN);
  CHECK_THAT(reply->reason(), Catch::Contains("only 1 of 2"));
}

TEST_CASE(
    "RendezvousState: joins after a server restart continue the round "
    "numbers",
    "[rendezvous]") {
  Harness fresh(1, 1);
  v1::JoinRequest r = fresh.Request("a");
  r.mutable_previous()->set_round(7);
  r.mutable_previous()->set_restart_count(2);
  REQUIRE(fresh.Join(r).ok());
  CHECK(fresh.Of("a").round() == 8);
  CHECK(fresh.Of("a").restart_count() == 2);
}

TEST_CASE("RendezvousState: jobs are independent", "[rendezvous]") {
  Harness h(1, 1);
  REQUIRE(h.Join("a").ok());
  v1::JoinRequest other = h.Request("a");
  other.set_rdzv_id("job2");
  other.mutable_config()->set_max_nodes(5);  // a different job may differ
  REQUIRE(h.Join(other).ok());
  auto all = h.state_.GetStatus("");
  REQUIRE(all.ok());
  CHECK(all->jobs_size() == 2);
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

TEST_CASE("RendezvousState: the wait list is bounded by max_nodes",
          "[rendezvous]") {
  Harness h(1, 1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("spare").ok());  // full round: one spare may wait
  Status s = h.Join("flood");
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(h.Job().nodes_size() == 2);
}

TEST_CASE("RendezvousState: finished jobs are forgotten after their TTL",
          "[rendezvous]") {
  Harness h(1, 1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Succeed("a").ok());
  h.Advance(std::chrono::minutes(59));
  CHECK(h.state_.job_count() == 1);
  CHECK(h.Join("a").code() == StatusCode::kFailedPrecondition);
  h.Advance(std::chrono::minutes(1));
  CHECK(h.state_.job_count() == 0);
}

TEST_CASE("RendezvousState: an inconsistent heartbeat cannot rebuild a job",
          "[rendezvous]") {
  Harness h(1, 2);
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = h.config_;
  *hb.mutable_node() = h.Request("a").node();
  hb.mutable_current()->set_round(3);
  hb.mutable_current()->set_group_rank(5);
  hb.mutable_current()->set_group_world_size(2);
  auto reply = h.state_.Heartbeat(hb);
  CHECK(reply.status().code() == StatusCode::kInvalidArgument);
  CHECK(h.state_.job_count() == 0);
}

}  // namespace
}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {
namespace {

v1::ReplaceRankRequest Replace(Harness& h, const std::string& node, int rank,
                               int64_t generation) {
  v1::ReplaceRankRequest r;
  r.set_rdzv_id("job");
  r.set_node_id(node);
  r.set_instance(Harness::Instance(node));
  r.set_round(h.Of(node).round());
  r.set_rank(rank);
  r.set_generation(generation);
  r.set_reason("local rank 1 (pid 7) killed by SIGKILL");
  return r;
}

std::vector<std::string> EventKinds(const v1::JobStatus& job) {
  std::vector<std::string> kinds;
  for (const v1::JobEvent& e : job.events()) {
    kinds.push_back(v1::JobEvent::Kind_Name(e.kind()));
  }
  return kinds;
}

}  // namespace

TEST_CASE("RendezvousState: ReplaceRank spends a restart and keeps the round",
          "[rendezvous][restart_scope]") {
  Harness h(2, 2, /*max_restarts=*/1);
  REQUIRE(h.Join("a", 2).ok());
  REQUIRE(h.Join("b", 2).ok());
  const int b0 = h.Of("b").rank_offset();
  StatusOr<v1::ReplaceRankResponse> r =
      h.state_.ReplaceRank(Replace(h, "b", b0 + 1, 1));
  REQUIRE(r.ok());
  CHECK(r->replaced());
  CHECK(r->restart_count() == 1);
  // The round runs on: nobody is told to re-join.
  CHECK(h.Job().state() == v1::JobStatus::STATE_RUNNING);
  CHECK(h.Job().round() == 1);
  CHECK(h.Heartbeat("a").action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  CHECK(h.Job().restart_count() == 1);
  const v1::JobStatus job = h.Job();
  const v1::JobEvent last = job.events(job.events_size() - 1);
  CHECK(last.kind() == v1::JobEvent::KIND_RANK_REPLACED);
  CHECK(last.reason().find("rank " + std::to_string(b0 + 1) +
                           " (generation 1) replaced on node 'b'") !=
        std::string::npos);

  // Healed: recorded, no budget.
  v1::ReplaceRankRequest healed = Replace(h, "b", b0 + 1, 1);
  healed.set_healed(true);
  healed.set_heal_seconds(1.25);
  REQUIRE(h.state_.ReplaceRank(healed).ok());
  const v1::JobStatus after = h.Job();
  CHECK(after.events(after.events_size() - 1).reason().find(
            "healed in 1.25 s") != std::string::npos);
  CHECK(EventKinds(h.Job()).back() == "KIND_RANK_HEALED");

  // The budget is spent: nothing changes, the node fails as under group.
  r = h.state_.ReplaceRank(Replace(h, "b", b0, 2));
  REQUIRE(r.ok());
  CHECK_FALSE(r->replaced());
  CHECK(r->restart_count() == 1);
  CHECK(h.Job().state() == v1::JobStatus::STATE_RUNNING);
}

TEST_CASE("RendezvousState: ReplaceRank hands out each generation once "
          "across nodes and refuses a second failure while one heals",
          "[rendezvous][restart_scope]") {
  Harness h(2, 2, /*max_restarts=*/5);
  REQUIRE(h.Join("a", 2).ok());
  REQUIRE(h.Join("b", 2).ok());
  const int a0 = h.Of("a").rank_offset();
  const int b0 = h.Of("b").rank_offset();
  // Both nodes' agents count from their own view: each proposes 1.
  StatusOr<v1::ReplaceRankResponse> r =
      h.state_.ReplaceRank(Replace(h, "b", b0, 1));
  REQUIRE(r.ok());
  REQUIRE(r->replaced());
  CHECK(r->generation() == 1);
  // Node a's rank fails while b's replacement heals: refused, nothing
  // spent, and the answer names the healing rank.
  r = h.state_.ReplaceRank(Replace(h, "a", a0, 1));
  REQUIRE(r.ok());
  CHECK_FALSE(r->replaced());
  CHECK(r->healing_rank() == b0);
  CHECK(r->healing_generation() == 1);
  CHECK(r->restart_count() == 1);
  // A heal report of another generation does not clear it.
  v1::ReplaceRankRequest stale = Replace(h, "b", b0, 7);
  stale.set_healed(true);
  REQUIRE(h.state_.ReplaceRank(stale).ok());
  CHECK_FALSE(h.state_.ReplaceRank(Replace(h, "a", a0, 1))->replaced());
  // Healed: node a's next failure gets generation 2, not its own 1.
  v1::ReplaceRankRequest healed = Replace(h, "b", b0, 1);
  healed.set_healed(true);
  REQUIRE(h.state_.ReplaceRank(healed).ok());
  r = h.state_.ReplaceRank(Replace(h, "a", a0, 1));
  REQUIRE(r.ok());
  CHECK(r->replaced());
  CHECK(r->generation() == 2);
  CHECK(r->healing_generation() == 0);
  CHECK(r->restart_count() == 2);
  // An agent that counted further (a rebuilt server's round) is believed.
  healed = Replace(h, "a", a0, 2);
  healed.set_healed(true);
  REQUIRE(h.state_.ReplaceRank(healed).ok());
  r = h.state_.ReplaceRank(Replace(h, "b", b0 + 1, 9));
  REQUIRE(r.ok());
  CHECK(r->generation() == 9);
}

TEST_CASE(
    "RendezvousState: every node of the round hears of the newest "
    "generation with its heartbeats, a waiting node does not",
    "[rendezvous][restart_scope]") {
  Harness h(2, 2, /*max_restarts=*/5);
  REQUIRE(h.Join("a", 2).ok());
  REQUIRE(h.Join("b", 2).ok());
  CHECK(h.Heartbeat("a").generation() == 0);
  const int b0 = h.Of("b").rank_offset();
  REQUIRE(h.state_.ReplaceRank(Replace(h, "b", b0, 1))->replaced());
  // Node a did not replace anything: this is how it learns of b's.
  CHECK(h.Heartbeat("a").generation() == 1);
  CHECK(h.Heartbeat("b").generation() == 1);
  v1::ReplaceRankRequest healed = Replace(h, "b", b0, 1);
  healed.set_healed(true);
  REQUIRE(h.state_.ReplaceRank(healed).ok());
  CHECK(h.Heartbeat("a").generation() == 1);  // a heal makes none
  REQUIRE(h.state_.ReplaceRank(Replace(h, "b", b0 + 1, 2))->replaced());
  CHECK(h.Heartbeat("a").generation() == 2);
  // A node parked on the wait list runs no round of this job.
  (void)h.Join("c", 2);
  CHECK(h.Heartbeat("c").generation() == 0);
  CHECK(h.Heartbeat("a").generation() == 2);
}

TEST_CASE(
    "RendezvousState: under replace_lost_nodes a waiting spare takes "
    "a lost node's place in the running round",
    "[rendezvous][restart_scope]") {
  Harness h(2, 2, /*max_restarts=*/3);
  h.config_.set_replace_lost_nodes(true);
  REQUIRE(h.Join("a", 2, 0).ok());
  REQUIRE(h.Join("b", 2, 1).ok());
  const v1::Assignment b = h.Of("b");
  REQUIRE(b.group_rank() == 1);
  REQUIRE(h.Join("c", 2).ok());  // the round is full: c waits
  CHECK_FALSE(h.Answered("c"));
  // b falls silent; a and the parked c are alive.
  for (int i = 0; i < 4; ++i) {
    h.Advance(std::chrono::seconds(1));
    CHECK(h.Heartbeat("a").action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  }
  REQUIRE(h.Answered("c"));
  REQUIRE(h.Answer("c").status.ok());
  const v1::Assignment c = h.Answer("c").assignment;
  CHECK(c.round() == b.round());
  CHECK(c.group_rank() == b.group_rank());
  CHECK(c.rank_offset() == b.rank_offset());
  CHECK(c.world_size() == 4);
  CHECK(c.master_addr() == b.master_addr());
  CHECK(c.master_port() == b.master_port());
  // The workers' store prefix is the round's: its restart count stays.
  CHECK(c.restart_count() == 0);
  CHECK(c.replaces_generation() == 1);
  // The round goes on: nobody re-joins, a hears of the generation, one
  // unit of the budget went.
  const v1::HeartbeatResponse a = h.Heartbeat("a");
  CHECK(a.action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  CHECK(a.generation() == 1);
  CHECK(h.Heartbeat("c").action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  const v1::JobStatus job = h.Job();
  CHECK(job.round() == b.round());
  CHECK(job.restart_count() == 1);
  CHECK(EventKinds(job).back() == "KIND_RANK_REPLACED");
  CHECK_THAT(job.events(job.events_size() - 1).reason(),
             Catch::Contains("ranks 2-3 (generation 1) of node 'b' go to "
                             "node 'c'"));
  // c reports the heal as a replacing node does; a later failure of c's
  // own rank is a replacement of generation 2.
  v1::ReplaceRankRequest healed = Replace(h, "c", 2, 1);
  healed.set_healed(true);
  REQUIRE(h.state_.ReplaceRank(healed).ok());
  StatusOr<v1::ReplaceRankResponse> r =
      h.state_.ReplaceRank(Replace(h, "c", 3, 1));
  REQUIRE(r.ok());
  CHECK(r->generation() == 2);
  // A failure that restarts the group: in the next round c starts its
  // workers afresh, as every node does, not as replacements.
  REQUIRE(h.Fail("a").ok());
  REQUIRE(h.Join("a", 2, 0).ok());
  REQUIRE(h.Join("c", 2).ok());
  REQUIRE(h.Answered("c"));
  CHECK(h.Answer("c").assignment.round() == b.round() + 1);
  CHECK(h.Answer("c").assignment.replaces_generation() == 0);
}

TEST_CASE(
    "RendezvousState: a lost node's place is not handed over without "
    "a fitting spare, for group rank 0, or while a rank heals",
    "[rendezvous][restart_scope]") {
  // a and b run round 1 (group ranks 0 and 1, 2 ranks each), c waits
  // with `spare_ranks` workers; then every node but `alive` falls silent
  // past the heartbeat timeout (after `before`, if any). The round ends.
  auto lose = [](bool replace, int spare_ranks, const std::string& alive,
                 const std::function<void(Harness&)>& before = nullptr) {
    Harness h(2, 2, 3);
    h.config_.set_replace_lost_nodes(replace);
    REQUIRE(h.Join("a", 2, 0).ok());
    REQUIRE(h.Join("b", 2, 1).ok());
    REQUIRE(h.Join("c", spare_ranks).ok());
    if (before) before(h);
    for (int i = 0; i < 4; ++i) {
      h.Advance(std::chrono::seconds(1));
      (void)h.TryHeartbeat(alive);
    }
    CHECK(h.Job().round() == 2);
    CHECK((!h.Answered("c") ||
           h.Answer("c").assignment.replaces_generation() == 0));
  };
  SECTION("the spare has another local world size") { lose(true, 1, "a"); }
  SECTION("group rank 0 (its agent served the workers' store)") {
    lose(true, 2, "b");
  }
  SECTION("a replacement of the round has not healed") {
    lose(true, 2, "a", [](Harness& h) {
      REQUIRE(h.state_.ReplaceRank(Replace(h, "a", 1, 1))->replaced());
    });
  }
  SECTION("the job does not ask for it") { lose(false, 2, "a"); }
}

TEST_CASE(
    "RendezvousState: under replace_wait_ms a lost node's place stays open "
    "and a node that joins later takes it, the round going on",
    "[rendezvous][restart_scope]") {
  // a and b run round 1 with 2 ranks each and nobody waits; b falls
  // silent past the heartbeat timeout.
  Harness h(2, 2, /*max_restarts=*/3);
  h.config_.set_replace_lost_nodes(true);
  h.config_.set_replace_wait_ms(10000);
  REQUIRE(h.Join("a", 2, 0).ok());
  REQUIRE(h.Join("b", 2, 1).ok());
  const v1::Assignment b = h.Of("b");
  for (int i = 0; i < 4; ++i) {
    h.Advance(std::chrono::seconds(1));
    CHECK(h.Heartbeat("a").action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  }
  v1::JobStatus job = h.Job();
  CHECK(job.round() == 1);
  CHECK(job.restart_count() == 0);  // nothing is spent for an open place
  REQUIRE(EventKinds(job).back() == "KIND_PLACE_OPEN");
  CHECK_THAT(job.events(job.events_size() - 1).reason(),
             Catch::Contains("the place of node 'b' (ranks 2-3) stays open "
                             "10.0 s"));
  // Meanwhile no rank of the round is replaced alone: the round waits.
  StatusOr<v1::ReplaceRankResponse> r =
      h.state_.ReplaceRank(Replace(h, "a", 1, 1));
  REQUIRE(r.ok());
  CHECK_FALSE(r->replaced());
  CHECK(r->healing_rank() == 2);

  // 5 s later a node joins: it takes b's place at once.
  const std::string joiner = GENERATE(as<std::string>{}, "d", "b");
  CAPTURE(joiner);  // a new agent, or b's agent coming back
  for (int i = 0; i < 5; ++i) {
    h.Advance(std::chrono::seconds(1));
    CHECK(h.Heartbeat("a").action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  }
  REQUIRE(h.Join(joiner, 2).ok());
  REQUIRE(h.Answered(joiner));
  REQUIRE(h.Answer(joiner).status.ok());
  const v1::Assignment d = h.Answer(joiner).assignment;
  CHECK(d.round() == b.round());
  CHECK(d.group_rank() == b.group_rank());
  CHECK(d.rank_offset() == b.rank_offset());
  CHECK(d.master_port() == b.master_port());
  CHECK(d.restart_count() == 0);
  CHECK(d.replaces_generation() == 1);
  const v1::HeartbeatResponse a = h.Heartbeat("a");
  CHECK(a.action() == v1::HeartbeatResponse::ACTION_CONTINUE);
  CHECK(a.generation() == 1);
  job = h.Job();
  CHECK(job.round() == 1);
  CHECK(job.restart_count() == 1);
  CHECK(EventKinds(job).back() == "KIND_RANK_REPLACED");
  CHECK_THAT(job.events(job.events_size() - 1).reason(),
             Catch::Contains("ranks 2-3 (generation 1) of node 'b' go to "
                             "node '" +
                             joiner + "'"));
  // The place was taken: its deadline passes without effect.
  for (int i = 0; i < 6; ++i) {
    h.Advance(std::chrono::seconds(1));
    CHECK(h.Heartbeat("a").action() == v1::HeartbeatResponse::ACTION_CONTINUE);
    (void)h.Heartbeat(joiner);
  }
  CHECK(h.Job().round() == 1);
}

TEST_CASE(
    "RendezvousState: an open place closes, ending the round, when nobody "
    "fitting joins in time, a second node is lost, or no budget is left",
    "[rendezvous][restart_scope]") {
  // a, b and c run round 1 (2 ranks each); c falls silent, and `then`
  // happens while its place is open. The round must end once.
  auto open = [](int max_restarts, const std::function<void(Harness&)>& then) {
    Harness h(1, 3, max_restarts);
    h.config_.set_replace_lost_nodes(true);
    h.config_.set_replace_wait_ms(10000);
    REQUIRE(h.Join("a", 2, 0).ok());
    REQUIRE(h.Join("b", 2, 1).ok());
    REQUIRE(h.Join("c", 2, 2).ok());
    for (int i = 0; i < 4; ++i) {
      h.Advance(std::chrono::seconds(1));
      (void)h.Heartbeat("a");
      (void)h.Heartbeat("b");
    }
    if (max_restarts > 0) {
      REQUIRE(EventKinds(h.Job()).back() == "KIND_PLACE_OPEN");
      CHECK(h.Job().round() == 1);
    }
    then(h);
    CHECK(h.Job().round() == 2);
    CHECK(h.Job().restart_count() == 0);
    return h.Job();
  };
  SECTION("nobody joins within replace_wait_ms") {
    const v1::JobStatus job = open(3, [](Harness& h) {
      for (int i = 0; i < 9; ++i) {
        h.Advance(std::chrono::seconds(1));
        CHECK(h.Heartbeat("a").action() ==
              v1::HeartbeatResponse::ACTION_CONTINUE);
        (void)h.Heartbeat("b");
      }
      h.Advance(std::chrono::seconds(1));
      CHECK(h.Heartbeat("a").action() == v1::HeartbeatResponse::ACTION_REJOIN);
    });
    CHECK_THAT(job.reason(),
               Catch::Contains("no node joined to take its place within "
                               "10.0 s"));
  }
  SECTION("a node that does not fit joins: the round grows as without it") {
    open(3, [](Harness& h) {
      REQUIRE(h.Join("d", 1).ok());
      CHECK_FALSE(h.Answered("d"));  // it joins the next round
    });
  }
  SECTION("a second node is lost") {
    open(3, [](Harness& h) {
      for (int i = 0; i < 4; ++i) {
        h.Advance(std::chrono::seconds(1));
        (void)h.Heartbeat("a");
      }
    });
  }
  SECTION("no budget: no place is kept open") {
    const v1::JobStatus job = open(0, [](Harness&) {});
    for (const std::string& kind : EventKinds(job)) {
      CHECK(kind != "KIND_PLACE_OPEN");
    }
  }
}

TEST_CASE("RendezvousState: ReplaceRank refuses what is not this node's",
          "[rendezvous][restart_scope]") {
  Harness h(2, 2, /*max_restarts=*/3);
  REQUIRE(h.Join("a", 2).ok());
  REQUIRE(h.Join("b", 2).ok());
  const int a0 = h.Of("a").rank_offset();
  // A rank of the other node.
  StatusOr<v1::ReplaceRankResponse> r =
      h.state_.ReplaceRank(Replace(h, "a", h.Of("b").rank_offset(), 1));
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  // Another round.
  v1::ReplaceRankRequest old = Replace(h, "a", a0, 1);
  old.set_round(7);
  CHECK(h.state_.ReplaceRank(old).status().code() ==
        StatusCode::kFailedPrecondition);
  // A node the job does not know.
  v1::ReplaceRankRequest stranger = Replace(h, "a", a0, 1);
  stranger.set_node_id("z");
  CHECK_FALSE(h.state_.ReplaceRank(stranger).ok());
  // A heal time that is not a time.
  v1::ReplaceRankRequest nan = Replace(h, "a", a0, 1);
  nan.set_healed(true);
  nan.set_heal_seconds(-1);
  CHECK(h.state_.ReplaceRank(nan).status().code() ==
        StatusCode::kInvalidArgument);
  // Nothing was spent.
  CHECK(h.Job().restart_count() == 0);
}

}  // namespace ddprun::rendezvous
