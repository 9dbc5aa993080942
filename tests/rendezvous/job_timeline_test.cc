// A job's timeline (JobStatus.events, round_ends) and the worker progress
// heartbeats carry (rank_rates: pid, state, scalars; worker_restarts):
// what the live view shows, from the state machine on a FakeClock.
#include "ddprun_catch.h"

#include <cmath>
#include <limits>
#include <string>

#include "rendezvous/core/job_timeline.h"
#include "rendezvous/core/rendezvous_state.h"
#include "tests/rendezvous/rendezvous_harness.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<std::string> Kinds(const v1::JobStatus& job) {
  std::vector<std::string> out;
  for (const v1::JobEvent& e : job.events()) {
    std::string k = v1::JobEvent::Kind_Name(e.kind());
    if (e.kind() == v1::JobEvent::KIND_ROUND_ENDED) {
      k += "/" + JobTimeline::CauseKey(e.cause());
    }
    out.push_back(k + "@" + std::to_string(e.round()));
  }
  return out;
}

TEST_CASE(
    "JobTimeline: rounds, a worker failure, a lost node and the end, "
    "with their causes",
    "[rendezvous][timeline]") {
  Harness h(1, 2, /*max_restarts=*/3);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Answered("b"));
  // A worker failure on b: the round ends (one budget unit), both re-join.
  REQUIRE(h.Fail("b").ok());
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  // b goes silent: lost, the round ends without spending the budget.
  for (int i = 0; i < 4; ++i) {
    h.Advance(seconds(1));
    h.Heartbeat("a");
  }
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Succeed("a").ok());
  const v1::JobStatus job = h.Job();
  CHECK(Kinds(job) ==
        std::vector<std::string>{
            "KIND_ROUND_COMPLETE@1", "KIND_ROUND_ENDED/worker_failure@1",
            "KIND_ROUND_COMPLETE@2", "KIND_ROUND_ENDED/node_lost@2",
            "KIND_ROUND_COMPLETE@3", "KIND_JOB_SUCCEEDED@3"});
  CHECK_THAT(job.events(1).reason(),
             Catch::Contains("node 'b' reported a worker failure in round 1"));
  CHECK_THAT(job.events(3).reason(), Catch::Contains("node 'b'"));
  CHECK_THAT(job.events(3).reason(), Catch::Contains("no heartbeat"));
  CHECK(job.events(0).nodes() == 2);
  CHECK(job.events(0).world_size() == 2);
  CHECK(job.events(4).nodes() == 1);
  // Times are the clock's wall seconds, in order.
  CHECK(job.events(0).unix_time() >= 1.7e9);
  CHECK(job.events(3).unix_time() > job.events(1).unix_time());
  REQUIRE(job.round_ends_size() == 2);
  CHECK(job.round_ends(0).cause() == v1::JobEvent::CAUSE_WORKER_FAILURE);
  CHECK(job.round_ends(0).count() == 1);
  CHECK(job.round_ends(1).cause() == v1::JobEvent::CAUSE_NODE_LOST);
  CHECK(job.round_ends(1).count() == 1);
}

TEST_CASE("JobTimeline: keeps the newest 64 events, counts every cause",
          "[rendezvous][timeline]") {
  Harness h(1, 1, /*max_restarts=*/100);
  REQUIRE(h.Join("a").ok());
  for (int i = 0; i < 50; ++i) {
    REQUIRE(h.Fail("a").ok());
    h.Advance(seconds(1));  // within the Join rate limit
    REQUIRE(h.Join("a").ok());
  }
  const v1::JobStatus job = h.Job();
  REQUIRE(job.events_size() == 64);
  CHECK(job.events(63).kind() == v1::JobEvent::KIND_ROUND_COMPLETE);
  CHECK(job.events(63).round() == 51);
  REQUIRE(job.round_ends_size() == 1);
  CHECK(job.round_ends(0).count() == 50);
  CHECK(JobTimeline::CauseKey(v1::JobEvent::CAUSE_NODE_REJOINED) ==
        "node_rejoined");
}

TEST_CASE("JobTimeline: a failure put down to a lost node is refunded",
          "[rendezvous][timeline]") {
  Harness h(1, 2, /*max_restarts=*/1);
  REQUIRE(h.Join("a").ok());
  REQUIRE(h.Join("b").ok());
  REQUIRE(h.Fail("a").ok());  // b's death broke a's collective
  for (int i = 0; i < 4; ++i) {
    h.Advance(seconds(1));
    if (i < 3) h.Heartbeat("a");
  }
  const v1::JobStatus job = h.Job();
  bool refunded = false;
  for (const v1::JobEvent& e : job.events()) {
    refunded |=
        e.kind() == v1::JobEvent::KIND_FAILURE_REFUNDED && e.round() == 1;
  }
  CHECK(refunded);
  CHECK(job.restart_count() == 0);
}

v1::HeartbeatRequest ProgressBeat(Harness& h, const std::string& node) {
  v1::HeartbeatRequest r;
  r.set_rdzv_id("job");
  *r.mutable_config() = h.config_;
  *r.mutable_node() = h.Request(node, 2).node();
  *r.mutable_current() = h.Of(node);
  r.set_worker_restarts(2);
  for (int rank = 0; rank < 2; ++rank) {
    v1::RankRate* rr = r.add_rank_rates();
    rr->set_rank(rank);
    rr->set_local_rank(rank);
    rr->set_pid(1000 + rank);
    rr->set_steps(10 * (rank + 1));
    rr->set_steps_per_s(2.5);
    rr->set_state(v1::RankRate::STATE_RUNNING);
    rr->set_total_steps(100);
    v1::Scalar* loss = rr->add_scalars();
    loss->set_name("loss");
    loss->set_value(0.25 * (rank + 1));
  }
  return r;
}

TEST_CASE("RendezvousState: worker progress from heartbeats is in Status",
          "[rendezvous][timeline]") {
  Harness h(1, 1);
  v1::JoinRequest join = h.Request("a", 2);
  join.mutable_node()->set_host("gpu-node-7");
  REQUIRE(h.Join(join).ok());
  REQUIRE(h.state_.Heartbeat(ProgressBeat(h, "a")).ok());
  const v1::JobStatus job = h.Job();
  REQUIRE(job.nodes_size() == 1);
  const v1::NodeStatus& n = job.nodes(0);
  CHECK(n.host() == "gpu-node-7");
  CHECK(n.worker_restarts() == 2);
  REQUIRE(n.rank_rates_size() == 2);
  CHECK(n.rank_rates(1).pid() == 1001);
  CHECK(n.rank_rates(1).total_steps() == 100);
  REQUIRE(n.rank_rates(1).scalars_size() == 1);
  CHECK(n.rank_rates(1).scalars(0).name() == "loss");
  CHECK(n.rank_rates(1).scalars(0).value() == Approx(0.5));
}

TEST_CASE(
    "RendezvousState: heartbeats with out-of-bounds progress are "
    "refused and change nothing",
    "[rendezvous][timeline]") {
  Harness h(1, 1);
  REQUIRE(h.Join(h.Request("a", 2)).ok());
  REQUIRE(h.state_.Heartbeat(ProgressBeat(h, "a")).ok());
  const std::string before = h.Job().SerializeAsString();
  struct Bad {
    const char* what;
    std::function<void(v1::HeartbeatRequest*)> spoil;
  };
  const Bad bad[] = {
      {"more than 8 scalars",
       [](v1::HeartbeatRequest* r) {
         for (int i = 0; i < 8; ++i) {
           v1::Scalar* s = r->mutable_rank_rates(0)->add_scalars();
           s->set_name("s" + std::to_string(i));
         }
       }},
      {"scalar names are",
       [](v1::HeartbeatRequest* r) {
         r->mutable_rank_rates(0)->mutable_scalars(0)->set_name(
             "<script>alert(1)</script>");
       }},
      {"1..32 bytes",
       [](v1::HeartbeatRequest* r) {
         r->mutable_rank_rates(0)->mutable_scalars(0)->set_name(
             std::string(33, 'x'));
       }},
      {"is not finite",
       [](v1::HeartbeatRequest* r) {
         r->mutable_rank_rates(0)->mutable_scalars(0)->set_value(
             std::numeric_limits<double>::quiet_NaN());
       }},
      {"steps_per_s is not finite",
       [](v1::HeartbeatRequest* r) {
         r->mutable_rank_rates(0)->set_steps_per_s(
             std::numeric_limits<double>::infinity());
       }},
      {"appears twice",
       [](v1::HeartbeatRequest* r) {
         *r->mutable_rank_rates(0)->add_scalars() = r->rank_rates(0).scalars(0);
       }},
      {"reported twice",
       [](v1::HeartbeatRequest* r) { r->mutable_rank_rates(1)->set_rank(0); }},
      {"negative step count",
       [](v1::HeartbeatRequest* r) {
         r->mutable_rank_rates(0)->set_steps(-1);
       }},
      {"worker_restarts is negative",
       [](v1::HeartbeatRequest* r) { r->set_worker_restarts(-1); }},
      {"host is longer than 256 bytes",
       [](v1::HeartbeatRequest* r) {
         r->mutable_node()->set_host(std::string(257, 'h'));
       }},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    v1::HeartbeatRequest r = ProgressBeat(h, "a");
    b.spoil(&r);
    h.clock_.Advance(milliseconds(100));
    auto reply = h.state_.Heartbeat(r);
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(reply.status().message(), Catch::Contains(b.what));
    // Nothing changed but the heartbeat age.
    v1::JobStatus now = h.Job();
    v1::JobStatus then;
    REQUIRE(then.ParseFromString(before));
    for (auto* s : {&now, &then}) {
      for (auto& n : *s->mutable_nodes()) n.set_heartbeat_age_ms(0);
    }
    CHECK(now.SerializeAsString() == then.SerializeAsString());
  }
}

}  // namespace
}  // namespace ddprun::rendezvous
