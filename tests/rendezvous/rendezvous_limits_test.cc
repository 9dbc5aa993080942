// Abuse limits (per-job nodes, jobs, Join/Heartbeat rates) and the bad-host
// policy of RendezvousState, driven by a FakeClock: no gRPC, no sleeps.
#include "ddprun_catch.h"

#include <cstdio>
#include <map>
#include <string>

#include "common/clock.h"
#include "rendezvous/core/rate_limiter.h"
#include "rendezvous/core/rendezvous_state.h"
#include "tests/rendezvous/rendezvous_harness.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Action = v1::HeartbeatResponse;

// True if `node` got an assignment for the job's running round.
bool InRound(Harness& h, const std::string& node) {
  return h.Answered(node) && h.Answer(node).status.ok() &&
         h.Job().state() == v1::JobStatus::STATE_RUNNING &&
         h.Of(node).round() == h.Job().round();
}

// Status of every job, serialized: equal bytes = no state change.
std::string StatusBytes(Harness& h) {
  auto s = h.state_.GetStatus("");
  REQUIRE(s.ok());
  return s->SerializeAsString();
}

// Every node re-joins after its round ended (what agents do on RESTART),
// then 1 s passes (a first round's last call).
void RejoinAll(Harness& h, std::initializer_list<const char*> nodes) {
  for (const char* n : nodes) REQUIRE(h.Join(n).ok());
  h.Advance(seconds(1));
}

// `secs` seconds pass with a heartbeat of each running node every second.
void Run(Harness& h, int secs, std::initializer_list<const char*> nodes) {
  for (int t = 0; t < secs; ++t) {
    h.Advance(seconds(1));
    for (const char* n : nodes) h.Heartbeat(n);
  }
}

Status JoinJob(Harness& h, const std::string& node, const std::string& job) {
  v1::JoinRequest r = h.Request(node);
  r.set_rdzv_id(job);
  return h.Join(r);
}

TEST_CASE("RendezvousState: a Join beyond max_nodes_per_job is refused",
          "[rendezvous][limits]") {
  JobDefaults d;
  d.max_nodes_per_job = 3;
  Harness c(1, 100, 0, d);
  for (const char* n : {"a", "b", "c"}) REQUIRE(c.Join(n).ok());
  const std::string before = StatusBytes(c);
  Status s = c.Join("d");
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("max_nodes_per_job"));
  CHECK(StatusBytes(c) == before);
  // A node already known may still re-join.
  CHECK(c.Join("a").ok());
}

TEST_CASE("RendezvousState: a Join that could overflow WORLD_SIZE is refused",
          "[rendezvous][limits]") {
  // Issue 39: with --max_nodes_per_job raised, 32768 nodes of 65536 ranks
  // summed to 2^31 in an int WORLD_SIZE.
  Harness h(1, 40000);
  Status s = h.Join("a", 65536);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("2^31-1"));
  CHECK(h.state_.job_count() == 0);
  // The largest share that fits: 40000 * 53687 < 2^31.
  CHECK(h.Join("a", 53687).ok());
  CHECK(h.Join("b", 53688).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("RendezvousState: Status of every job comes in bounded pages",
          "[rendezvous][limits]") {
  // Issue 39: Status of every job was built at once under the server's one
  // lock (10000 jobs x 4096 nodes stalled every heartbeat).
  Harness h(64, 64);
  const int jobs = 600;
  for (int j = 0; j < jobs; ++j) {
    char id[16];
    std::snprintf(id, sizeof(id), "job%04d", j);
    for (int n = 0; n < 64; ++n) {
      v1::JoinRequest r = h.Request("n" + std::to_string(n));
      r.set_rdzv_id(id);
      REQUIRE(h.Join(r).ok());
    }
  }
  std::string after;
  int seen = 0, pages = 0;
  while (true) {
    v1::StatusResponse page = h.state_.GetStatusPage(after);
    ++pages;
    size_t nodes = 0;
    for (const v1::JobStatus& job : page.jobs()) {
      CHECK(job.rdzv_id() > after);
      after = job.rdzv_id();
      nodes += job.nodes_size();
      ++seen;
    }
    // Bounded: the cost bound plus one job.
    CHECK(nodes <= RendezvousState::kStatusPageCost + 64);
    if (page.next_page_after().empty()) break;
    CHECK(page.next_page_after() == after);
  }
  CHECK(seen == jobs);
  CHECK(pages == 10);  // 600 * 65 = 39000 = 9.5 pages of 4096
}

TEST_CASE("RendezvousState: max_jobs bounds the number of jobs",
          "[rendezvous][limits]") {
  StateLimits l;
  l.max_jobs = 2;
  Harness c(2, 2, 0, {}, l);
  REQUIRE(JoinJob(c, "a", "j1").ok());
  REQUIRE(JoinJob(c, "a", "j2").ok());
  Status s = JoinJob(c, "a", "j3");
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
  Harness c(1, 1, 0, {}, l);
  REQUIRE(c.Join("a").ok());
  c.Advance(seconds(2));
  REQUIRE(InRound(c, "a"));
  for (int i = 0; i < 5; ++i) c.Heartbeat("a");
  const std::string before = StatusBytes(c);
  auto refused = c.TryHeartbeat("a");
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(refused.status().message(), Catch::Contains("rate limit"));
  CHECK(StatusBytes(c) == before);
  // Joins of a spare node: the burst of 3, then refused.
  REQUIRE(c.Join("b").ok());
  REQUIRE(c.Join("b").ok());
  REQUIRE(c.Join("b").ok());
  const std::string before_join = StatusBytes(c);
  Status s = c.Join("b");
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("rate limit"));
  CHECK(StatusBytes(c) == before_join);
}

TEST_CASE("RendezvousState: default rate limits never bite a healthy job",
          "[rendezvous][limits]") {
  Harness c(2, 2, 100);
  c.hosts_ = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}};
  // 20 rounds, each ended by a worker failure, one heartbeat per second
  // for 30 s each: 20 Joins and 600 Heartbeats per node.
  for (int round = 0; round < 20; ++round) {
    REQUIRE(c.Join("a").ok());
    REQUIRE(c.Join("b").ok());
    REQUIRE(InRound(c, "a"));
    for (int t = 0; t < 30; ++t) {
      c.Advance(seconds(1));
      c.Heartbeat("a");
      c.Heartbeat("b");
    }
    REQUIRE(c.Fail("a").ok());
  }
}

// Hosts A and B run a 1:3 job (window 60 s, cool-down 120 s); host A's
// workers keep failing.
void UseBadHostPolicy(Harness* c, int failures) {
  c->config_.set_join_timeout_ms(600000);
  c->config_.set_last_call_timeout_ms(1000);
  c->config_.set_bad_host_failures(failures);
  c->config_.set_bad_host_window_ms(60000);
  c->config_.set_bad_host_cooldown_ms(120000);
  c->hosts_ = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}, {"a2", "10.0.0.1"}};
}

TEST_CASE("RendezvousState: a host that failed K times sits out the cool-down",
          "[rendezvous][badhost]") {
  Harness c(1, 3, 100);
  UseBadHostPolicy(&c, 2);
  RejoinAll(c, {"a", "b"});
  REQUIRE(InRound(c, "a"));
  REQUIRE(c.Fail("a").ok());  // failure 1 of host A
  RejoinAll(c, {"a", "b"});
  REQUIRE(InRound(c, "a"));
  Run(c, 10, {"a", "b"});
  REQUIRE(c.Fail("a").ok());  // failure 2 within 60 s: A excluded
  RejoinAll(c, {"b", "a"});
  // The round forms without A (>= min_nodes), at once.
  CHECK(InRound(c, "b"));
  CHECK(c.Of("b").group_world_size() == 1);
  CHECK_FALSE(InRound(c, "a"));
  auto job = c.Job();
  bool a_waits = false;
  for (const auto& n : job.nodes()) {
    a_waits |= n.node_id() == "a" && n.state() == v1::NodeStatus::STATE_WAITING;
  }
  CHECK(a_waits);
  // A restarted agent on host A (new node id) is excluded too.
  REQUIRE(c.Join("a2").ok());
  CHECK_FALSE(InRound(c, "a2"));
  // B keeps running without being told to re-join.
  for (int t = 0; t < 118; ++t) {
    c.Advance(seconds(1));
    REQUIRE(c.Heartbeat("b").action() == Action::ACTION_CONTINUE);
  }
  // Cool-down over (120 s after the second failure): A is let in; B re-joins.
  c.Advance(seconds(1));
  REQUIRE(c.Heartbeat("b").action() == Action::ACTION_REJOIN);
  REQUIRE(c.Join("b").ok());
  CHECK(InRound(c, "b"));
  CHECK(c.Of("b").group_world_size() == 3);
  CHECK(InRound(c, "a"));
  CHECK(InRound(c, "a2"));
}

TEST_CASE("RendezvousState: failures older than the window are forgotten",
          "[rendezvous][badhost]") {
  Harness c(1, 3, 100);
  UseBadHostPolicy(&c, 2);
  RejoinAll(c, {"a", "b"});
  REQUIRE(c.Fail("a").ok());
  RejoinAll(c, {"a", "b"});
  Run(c, 61, {"a", "b"});  // the first failure leaves the 60 s window
  REQUIRE(c.Fail("a").ok());
  RejoinAll(c, {"a", "b"});
  CHECK(InRound(c, "a"));
  CHECK(c.Of("a").group_world_size() == 2);
}

TEST_CASE("RendezvousState: bad_host_failures=0 never excludes a host",
          "[rendezvous][badhost]") {
  Harness c(1, 3, 100);
  UseBadHostPolicy(&c, 0);
  for (int i = 0; i < 5; ++i) {
    RejoinAll(c, {"a", "b"});
    REQUIRE(InRound(c, "a"));
    REQUIRE(c.Fail("a").ok());
  }
  RejoinAll(c, {"a", "b"});
  CHECK(InRound(c, "a"));
}

TEST_CASE("RendezvousState: an excluded host below min_nodes waits it out",
          "[rendezvous][badhost]") {
  Harness c(1, 3, 100);
  UseBadHostPolicy(&c, 1);
  c.config_.set_min_nodes(2);
  RejoinAll(c, {"a", "b"});
  REQUIRE(InRound(c, "a"));
  REQUIRE(c.Fail("a").ok());  // K=1: excluded at once
  RejoinAll(c, {"a", "b"});
  CHECK_FALSE(InRound(c, "b"));  // 1 < min_nodes: no round
  c.Advance(seconds(118));
  CHECK_FALSE(InRound(c, "b"));
  c.Advance(seconds(1));  // cool-down over: the round forms with both
  CHECK(InRound(c, "a"));
  CHECK(InRound(c, "b"));
}

// A Join from an agent that ran round 7 (restart count 2) before the server
// restarted: accepted, it would move the job's round and restart count.
v1::JoinRequest FromRound7(Harness& h, const std::string& node) {
  v1::JoinRequest r = h.Request(node);
  r.mutable_previous()->set_round(7);
  r.mutable_previous()->set_restart_count(2);
  return r;
}

TEST_CASE(
    "RendezvousState: a Join refused by max_nodes_per_job leaves round "
    "and restart count alone",
    "[rendezvous][limits]") {
  JobDefaults d;
  d.max_nodes_per_job = 1;
  Harness c(2, 2, 5, d);
  REQUIRE(c.Join("a").ok());
  const std::string before = StatusBytes(c);
  CHECK(c.Join(FromRound7(c, "b")).code() == StatusCode::kResourceExhausted);
  CHECK(c.Job().round() == 1);
  CHECK(c.Job().restart_count() == 0);
  CHECK(StatusBytes(c) == before);
}

TEST_CASE(
    "RendezvousState: a Join refused by a full wait list leaves round and "
    "restart count alone",
    "[rendezvous][limits]") {
  // Host A is excluded (bad-host policy), so its nodes go to the wait list,
  // which holds max_nodes = 1 node.
  Harness c(1, 1, 5);
  UseBadHostPolicy(&c, 1);
  RejoinAll(c, {"a"});
  REQUIRE(InRound(c, "a"));
  REQUIRE(c.Fail("a").ok());  // K=1: host A excluded, round 2 opens
  REQUIRE(c.Join("a").ok());  // parked: the wait list is full now
  const std::string before = StatusBytes(c);
  const int64_t round = c.Job().round();
  const int restarts = c.Job().restart_count();
  Status s = c.Join(FromRound7(c, "a2"));
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(s.message(), Catch::Contains("wait list is full"));
  CHECK(c.Job().round() == round);
  CHECK(c.Job().restart_count() == restarts);
  CHECK(StatusBytes(c) == before);
}

}  // namespace
TEST_CASE(
    "RendezvousState: a node that fails its health check counts for "
    "the bad-host policy",
    "[rendezvous][badhost]") {
  Harness c(1, 3, 100);
  UseBadHostPolicy(&c, 1);
  // Host A's agent reports itself unhealthy before the job even exists.
  v1::JoinRequest sick = c.Request("a");
  sick.set_unhealthy("GPU 1 has 40000 MiB of 81559 MiB in use");
  Status s = c.Join(sick);
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(s.message(), Catch::Contains("its health check failed: GPU 1"));
  CHECK_FALSE(c.Answered("a"));  // not joined, nothing parked
  // The job it created keeps the count: with K = 1 host A sits out the
  // cool-down, a new agent of host A included, while B's round forms.
  RejoinAll(c, {"b"});
  CHECK(InRound(c, "b"));
  REQUIRE(c.Join("a2").ok());
  CHECK_FALSE(InRound(c, "a2"));
  CHECK(c.Of("b").group_world_size() == 1);
  // An over-long reason is refused like any other reason.
  v1::JoinRequest loud = c.Request("a");
  loud.set_unhealthy(std::string(5000, 'x'));
  CHECK(c.Join(loud).code() == StatusCode::kInvalidArgument);
}

TEST_CASE(
    "RendezvousState: with the policy off an unhealthy report only "
    "refuses the join",
    "[rendezvous][badhost]") {
  Harness c(1, 3, 100);
  UseBadHostPolicy(&c, 0);
  v1::JoinRequest sick = c.Request("a");
  sick.set_unhealthy("no /dev/shm");
  CHECK(c.Join(sick).code() == StatusCode::kFailedPrecondition);
  RejoinAll(c, {"a", "b"});  // healthy again: it joins
  CHECK(InRound(c, "a"));
  CHECK(c.Of("a").group_world_size() == 2);
}

}  // namespace ddprun::rendezvous
