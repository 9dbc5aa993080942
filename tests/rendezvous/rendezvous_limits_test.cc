// Abuse limits (per-job nodes, jobs, Join/Heartbeat rates) and the bad-host
// policy of RendezvousState, driven by a FakeClock: no gRPC, no sleeps.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "common/clock.h"
#include "rendezvous/rate_limiter.h"
#include "rendezvous/rendezvous_state.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Action = v1::HeartbeatResponse;

// Agents on hosts of our choosing; records answers to parked calls.
class Cluster {
 public:
  Cluster(int min, int max, JobDefaults defaults = {}, StateLimits limits = {},
          int max_restarts = 100)
      : state_(&clock_, defaults, limits) {
    config_.set_min_nodes(min);
    config_.set_max_nodes(max);
    config_.set_max_restarts(max_restarts);
    config_.set_last_call_timeout_ms(1000);
    config_.set_heartbeat_timeout_ms(3000);
  }

  // Node `node` lives on host `addr`; a new instance per call (a restarted
  // agent gets a new node id in practice, and a new instance).
  v1::NodeInfo Node(const std::string& node) {
    v1::NodeInfo n;
    n.set_node_id(node);
    n.set_instance(1);
    n.set_local_world_size(2);
    n.set_node_rank_hint(-1);
    n.set_addr(host_.count(node) ? host_[node] : "10.1.0.1");
    n.set_master_port(29500);
    return n;
  }
  Status Join(const std::string& node, const std::string& rdzv = "job") {
    v1::JoinRequest r;
    r.set_rdzv_id(rdzv);
    *r.mutable_config() = config_;
    *r.mutable_node() = Node(node);
    *r.mutable_previous() = assignments_[node];
    const WaiterId w = next_waiter_++;
    waiter_key_[w] = node;
    Status s = state_.Join(r, w);
    Collect();
    return s;
  }
  StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& node) {
    v1::HeartbeatRequest r;
    r.set_rdzv_id("job");
    *r.mutable_config() = config_;
    *r.mutable_node() = Node(node);
    *r.mutable_current() = assignments_[node];
    auto reply = state_.Heartbeat(r);
    Collect();
    return reply;
  }
  Status Fail(const std::string& node) {
    v1::ReportFailureRequest r;
    r.set_rdzv_id("job");
    r.set_node_id(node);
    r.set_instance(1);
    r.set_round(assignments_[node].round());
    const WaiterId w = next_waiter_++;
    waiter_key_[w] = node + "/failure";
    Status s = state_.ReportFailure(r, w);
    Collect();
    return s;
  }
  void Advance(Clock::Duration d) {
    clock_.Advance(d);
    state_.Tick();
    Collect();
  }
  // True if `node` got an assignment for the job's current round.
  bool InRound(const std::string& node) {
    return answers_.count(node) && answers_[node].status.ok() &&
           assignments_[node].round() == Job().round() &&
           Job().state() == v1::JobStatus::STATE_RUNNING;
  }
  v1::JobStatus Job() {
    auto s = state_.GetStatus("job");
    REQUIRE(s.ok());
    return s->jobs(0);
  }
  std::string StatusBytes() {
    auto s = state_.GetStatus("");
    REQUIRE(s.ok());
    std::string out;
    s->SerializeToString(&out);
    return out;
  }
  // Every node re-joins after its round ended (what agents do on RESTART),
  // then 1 s passes (a first round's last call).
  void RejoinAll(std::initializer_list<const char*> nodes) {
    for (const char* n : nodes) REQUIRE(Join(n).ok());
    Advance(seconds(1));
  }
  // `secs` seconds pass with a heartbeat of each running node every second.
  void Run(int secs, std::initializer_list<const char*> nodes) {
    for (int t = 0; t < secs; ++t) {
      Advance(seconds(1));
      for (const char* n : nodes) REQUIRE(Heartbeat(n).ok());
    }
  }

  FakeClock clock_;
  RendezvousState state_;
  v1::JobConfig config_;
  std::map<std::string, std::string> host_;
  std::map<std::string, Outcome> answers_;
  std::map<std::string, v1::Assignment> assignments_;

 private:
  void Collect() {
    for (Outcome& o : state_.TakeOutcomes()) {
      const std::string& key = waiter_key_.at(o.waiter);
      if (o.status.ok() && o.assignment.round() > 0) {
        assignments_[key] = o.assignment;
      }
      answers_[key] = o;
    }
  }
  WaiterId next_waiter_ = 1;
  std::map<WaiterId, std::string> waiter_key_;
};

TEST_CASE("RendezvousState: a Join beyond max_nodes_per_job is refused",
          "[rendezvous][limits]") {
  JobDefaults d;
  d.max_nodes_per_job = 3;
  Cluster c(1, 100, d);
  for (const char* n : {"a", "b", "c"}) REQUIRE(c.Join(n).ok());
  const std::string before = c.StatusBytes();
  Status s = c.Join("d");
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("max_nodes_per_job"));
  CHECK(c.StatusBytes() == before);
  // A node already known may still re-join.
  CHECK(c.Join("a").ok());
}

TEST_CASE("RendezvousState: max_jobs bounds the number of jobs",
          "[rendezvous][limits]") {
  StateLimits l;
  l.max_jobs = 2;
  Cluster c(2, 2, {}, l);
  REQUIRE(c.Join("a", "j1").ok());
  REQUIRE(c.Join("a", "j2").ok());
  Status s = c.Join("a", "j3");
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(c.state_.job_count() == 2);
}

TEST_CASE("RateLimiter: burst, then the sustained rate, per key",
          "[rendezvous][limits]") {
  FakeClock clock;
  RateLimiter limiter(&clock, /*rate_per_s=*/2, /*burst=*/3);
  for (int i = 0; i < 3; ++i) CHECK(limiter.Allow("a"));
  CHECK_FALSE(limiter.Allow("a"));
  CHECK(limiter.Allow("b"));  // another key has its own bucket
  clock.Advance(milliseconds(499));
  CHECK_FALSE(limiter.Allow("a"));
  clock.Advance(milliseconds(1));
  CHECK(limiter.Allow("a"));
  CHECK_FALSE(limiter.Allow("a"));
  clock.Advance(seconds(100));  // refills to the burst, not beyond
  for (int i = 0; i < 3; ++i) CHECK(limiter.Allow("a"));
  CHECK_FALSE(limiter.Allow("a"));
}

TEST_CASE("RateLimiter: a flood of fresh keys cannot grow memory",
          "[rendezvous][limits]") {
  FakeClock clock;
  RateLimiter limiter(&clock, 1, 2, /*max_keys=*/4);
  for (int i = 0; i < 4; ++i) CHECK(limiter.Allow("k" + std::to_string(i)));
  CHECK_FALSE(limiter.Allow("fresh"));  // every slot busy
  CHECK(limiter.key_count() == 4);
  clock.Advance(seconds(2));  // idle buckets are full again: dropped
  CHECK(limiter.Allow("fresh"));
  CHECK(limiter.key_count() == 1);
}

TEST_CASE("RendezvousState: Heartbeat and Join floods get rate limit errors",
          "[rendezvous][limits]") {
  StateLimits l;
  l.heartbeat_burst = 5;
  l.heartbeat_rate_per_s = 2;
  l.join_burst = 3;
  l.join_rate_per_s = 1;
  Cluster c(1, 1, {}, l);
  REQUIRE(c.Join("a").ok());
  c.Advance(seconds(2));
  REQUIRE(c.InRound("a"));
  for (int i = 0; i < 5; ++i) REQUIRE(c.Heartbeat("a").ok());
  const std::string before = c.StatusBytes();
  auto refused = c.Heartbeat("a");
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(refused.status().message(), Catch::Contains("rate limit"));
  CHECK(c.StatusBytes() == before);
  // Joins of a spare node: the burst of 3, then refused.
  REQUIRE(c.Join("b").ok());
  REQUIRE(c.Join("b").ok());
  REQUIRE(c.Join("b").ok());
  const std::string before_join = c.StatusBytes();
  Status s = c.Join("b");
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("rate limit"));
  CHECK(c.StatusBytes() == before_join);
}

TEST_CASE("RendezvousState: default rate limits never bite a healthy job",
          "[rendezvous][limits]") {
  Cluster c(2, 2);
  c.host_ = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}};
  // 20 rounds, each ended by a worker failure, one heartbeat per second
  // for 30 s each: 20 Joins and 600 Heartbeats per node.
  for (int round = 0; round < 20; ++round) {
    REQUIRE(c.Join("a").ok());
    REQUIRE(c.Join("b").ok());
    REQUIRE(c.InRound("a"));
    for (int t = 0; t < 30; ++t) {
      c.Advance(seconds(1));
      REQUIRE(c.Heartbeat("a").ok());
      REQUIRE(c.Heartbeat("b").ok());
    }
    REQUIRE(c.Fail("a").ok());
  }
}

// Hosts A and B run a 1:3 job (window 60 s, cool-down 120 s); host A's
// workers keep failing.
void UseBadHostPolicy(Cluster* c, int failures) {
  c->config_.set_bad_host_failures(failures);
  c->config_.set_bad_host_window_ms(60000);
  c->config_.set_bad_host_cooldown_ms(120000);
  c->host_ = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}, {"a2", "10.0.0.1"}};
}

TEST_CASE("RendezvousState: a host that failed K times sits out the cool-down",
          "[rendezvous][badhost]") {
  Cluster c(1, 3);
  UseBadHostPolicy(&c, 2);
  c.RejoinAll({"a", "b"});
  REQUIRE(c.InRound("a"));
  REQUIRE(c.Fail("a").ok());  // failure 1 of host A
  c.RejoinAll({"a", "b"});
  REQUIRE(c.InRound("a"));
  c.Run(10, {"a", "b"});
  REQUIRE(c.Fail("a").ok());  // failure 2 within 60 s: A excluded
  c.RejoinAll({"b", "a"});
  // The round forms without A (>= min_nodes), at once.
  CHECK(c.InRound("b"));
  CHECK(c.assignments_["b"].group_world_size() == 1);
  CHECK_FALSE(c.InRound("a"));
  auto job = c.Job();
  bool a_waits = false;
  for (const auto& n : job.nodes()) {
    a_waits |= n.node_id() == "a" && n.state() == v1::NodeStatus::STATE_WAITING;
  }
  CHECK(a_waits);
  // A restarted agent on host A (new node id) is excluded too.
  REQUIRE(c.Join("a2").ok());
  CHECK_FALSE(c.InRound("a2"));
  // B keeps running without being told to re-join.
  for (int t = 0; t < 118; ++t) {
    c.Advance(seconds(1));
    REQUIRE(c.Heartbeat("b")->action() == Action::ACTION_CONTINUE);
  }
  // Cool-down over (120 s after the second failure): A is let in; B re-joins.
  c.Advance(seconds(1));
  REQUIRE(c.Heartbeat("b")->action() == Action::ACTION_REJOIN);
  REQUIRE(c.Join("b").ok());
  CHECK(c.InRound("b"));
  CHECK(c.assignments_["b"].group_world_size() == 3);
  CHECK(c.InRound("a"));
  CHECK(c.InRound("a2"));
}

TEST_CASE("RendezvousState: failures older than the window are forgotten",
          "[rendezvous][badhost]") {
  Cluster c(1, 3);
  UseBadHostPolicy(&c, 2);
  c.RejoinAll({"a", "b"});
  REQUIRE(c.Fail("a").ok());
  c.RejoinAll({"a", "b"});
  c.Run(61, {"a", "b"});  // the first failure leaves the 60 s window
  REQUIRE(c.Fail("a").ok());
  c.RejoinAll({"a", "b"});
  CHECK(c.InRound("a"));
  CHECK(c.assignments_["a"].group_world_size() == 2);
}

TEST_CASE("RendezvousState: bad_host_failures=0 never excludes a host",
          "[rendezvous][badhost]") {
  Cluster c(1, 3);
  UseBadHostPolicy(&c, 0);
  for (int i = 0; i < 5; ++i) {
    c.RejoinAll({"a", "b"});
    REQUIRE(c.InRound("a"));
    REQUIRE(c.Fail("a").ok());
  }
  c.RejoinAll({"a", "b"});
  CHECK(c.InRound("a"));
}

TEST_CASE("RendezvousState: an excluded host below min_nodes waits it out",
          "[rendezvous][badhost]") {
  Cluster c(1, 3);
  UseBadHostPolicy(&c, 1);
  c.config_.set_min_nodes(2);
  c.RejoinAll({"a", "b"});
  REQUIRE(c.InRound("a"));
  REQUIRE(c.Fail("a").ok());  // K=1: excluded at once
  c.RejoinAll({"a", "b"});
  CHECK_FALSE(c.InRound("b"));  // 1 < min_nodes: no round
  c.Advance(seconds(118));
  CHECK_FALSE(c.InRound("b"));
  c.Advance(seconds(1));  // cool-down over: the round forms with both
  CHECK(c.InRound("a"));
  CHECK(c.InRound("b"));
}

}  // namespace
}  // namespace ddprun::rendezvous
