// The hang response on its own: a manual event loop on a FakeClock, the fake
// rendezvous client and console of the agent's tests, workers and a stack
// collector that answer when the test says. Nothing sleeps.

#include "ddprun_catch.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/watch/hang_response.h"
#include "tests/agent/agent_fakes.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using ddprun::testing::ManualEventLoop;
using testing::CaptureConsole;
using testing::FakeRendezvous;

// Rank 0 and 2 wait in an all-reduce; rank 1 is stuck loading data.
constexpr const char* kWaiting =
    "Current thread 0x00007f2f2f9d4b80 (most recent call first):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/"
    "distributed_c10d.py\", line 1436 in all_reduce\n"
    "  File \"/home/u/job/train.py\", line 102 in train_step\n"
    "  File \"/home/u/job/train.py\", line 130 in <module>\n";
constexpr const char* kLoading =
    "Current thread 0x00007f2f2f9d4b80 (most recent call first):\n"
    "  File \"/home/u/job/data.py\", line 88 in load\n"
    "  File \"/home/u/job/train.py\", line 101 in train_step\n"
    "  File \"/home/u/job/train.py\", line 130 in <module>\n";
constexpr const char* kVerdict =
    "rank 1 (pid 1001) is in data.py:88 in load while ranks 0,2 wait in "
    "all_reduce (train.py:102 in train_step)";

// The agent's side: which workers run (with a stacks file), and the kills.
class FakeWorkers : public HangResponse::Workers {
 public:
  std::vector<StackTarget> StackTargets() const override { return running; }
  void KillHung(int local_rank, const std::string& diagnosis) override {
    kills.push_back({local_rank, diagnosis});
  }
  std::vector<StackTarget> running;
  std::vector<std::pair<int, std::string>> kills;  // local rank, diagnosis
};

// Collects when the test says: Answer() ends the collection in flight.
class FakeStackCollector : public StackCollector {
 public:
  explicit FakeStackCollector(EventLoop* loop) : loop_(loop) {}
  bool Collect(std::vector<StackTarget> targets, const std::string& why,
               Clock::Duration limit, Done done) override {
    if (done_) return false;
    targets_ = std::move(targets);
    whys.push_back(why);
    limits.push_back(limit);
    done_ = std::move(done);
    return true;
  }
  bool busy() const override { return static_cast<bool>(done_); }

  // Every target's dump by pid; a pid without one did not answer. Posted,
  // as the real collector's `done`.
  void Answer(const std::map<int, std::string>& dumps) {
    REQUIRE(done_);
    std::vector<StackResult> results;
    for (const StackTarget& t : targets_) {
      StackResult r;
      r.target = t;
      auto it = dumps.find(t.pid);
      if (it == dumps.end()) {
        r.missing = "did not answer within 2.0 s";
      } else {
        r.dump = it->second;
      }
      results.push_back(std::move(r));
    }
    loop_->Post([done = std::move(done_), results] { done(results); });
    done_ = nullptr;
  }

  std::vector<std::string> whys;
  std::vector<Clock::Duration> limits;

 private:
  EventLoop* loop_;
  std::vector<StackTarget> targets_;
  Done done_;
};

// One hang response over three running workers (global ranks 0-2, pids
// 1000-1002) of round 0 on node 0.
struct Harness {
  explicit Harness(bool stacks = true) : rendezvous(&loop) {
    for (int lr = 0; lr < 3; ++lr) {
      workers.running.push_back(
          {lr, 1000 + lr,
           "/logs/attempt_0/" + std::to_string(lr) + "/stacks.txt"});
    }
    std::unique_ptr<FakeStackCollector> owned;
    if (stacks) {
      owned = std::make_unique<FakeStackCollector>(&loop);
      collector = owned.get();
    }
    HangResponse::Options options;
    options.run_log_dir = "/logs";
    options.hostname = [this] {
      ++hostname_lookups;
      return std::string("host-a");
    };
    hang =
        std::make_unique<HangResponse>(std::move(options), &loop, &rendezvous,
                                       &console, &workers, std::move(owned));
    round.group_world_size = 1;
    hang->StartGroup(round);
  }

  // Round 0 of a two-node job whose backend gathers stacks across nodes.
  void TwoNodes() {
    rendezvous.supports_stacks = true;
    round.group_world_size = 2;
    hang->StartGroup(round);
  }

  // Every worker answers: rank 1 loads data, the others wait.
  void AnswerAll() {
    collector->Answer({{1000, kWaiting}, {1001, kLoading}, {1002, kWaiting}});
    loop.RunUntilIdle();
  }

  ManualEventLoop loop;
  FakeRendezvous rendezvous;
  CaptureConsole console;
  FakeWorkers workers;
  FakeStackCollector* collector = nullptr;
  rendezvous::RendezvousResult round;
  int hostname_lookups = 0;
  std::unique_ptr<HangResponse> hang;
};

TEST_CASE("HangResponse: a hung worker is killed once every stack is in",
          "[agent][stacks]") {
  Harness h;
  CHECK(h.hang->collects_stacks());
  h.hang->OnHung(1, 1001, "stopped (state T) for 2.1 s");
  h.loop.RunUntilIdle();
  REQUIRE(h.collector->whys ==
          std::vector<std::string>{"watchdog: local_rank 1 hung"});
  CHECK(h.collector->limits[0] == 2s);
  CHECK(h.workers.kills.empty());  // not before the stacks are in
  h.AnswerAll();
  REQUIRE(h.workers.kills.size() == 1);
  CHECK(h.workers.kills[0].first == 1);
  CHECK(h.workers.kills[0].second == kVerdict);
  // Every rank's line, then where the files are.
  CHECK(h.console.err.find("  rank 1 (pid 1001): data.py:88 in load") !=
        std::string::npos);
  CHECK(h.console.err.find("  rank 0 (pid 1000): distributed_c10d.py:1436") !=
        std::string::npos);
  CHECK(
      h.console.err.find("  every thread's stack: /logs/attempt_0/<local_rank>/"
                         "stacks.txt\n") != std::string::npos);
  // One node: nothing gathered.
  CHECK(h.rendezvous.gathers.empty());
}

TEST_CASE("HangResponse: once the verdict is in, a hang is killed at once",
          "[agent][stacks]") {
  Harness h;
  h.hang->OnHung(1, 1001, "stopped");
  h.AnswerAll();
  h.hang->OnHung(2, 1002, "without a heartbeat");
  CHECK(h.collector->whys.size() == 1);  // no second collection
  REQUIRE(h.workers.kills.size() == 2);
  CHECK(h.workers.kills[1] == std::make_pair(2, std::string(kVerdict)));
  // A new group has no verdict yet: its hang is collected again, and a
  // worker without a stacks file is killed without the old group's verdict.
  h.hang->StartGroup(h.round);
  h.hang->OnHung(1, 1001, "stopped");
  CHECK(h.collector->whys.size() == 2);
  CHECK(h.workers.kills.size() == 2);
  h.workers.running.erase(h.workers.running.begin());
  h.hang->OnHung(0, 1000, "stopped");
  REQUIRE(h.workers.kills.size() == 3);
  CHECK(h.workers.kills[2] == std::make_pair(0, std::string()));
}

TEST_CASE("HangResponse: hangs during a collection wait for it",
          "[agent][stacks]") {
  Harness h;
  // A dump on demand is running when two workers are found hung.
  h.hang->DumpStacks();
  REQUIRE(h.collector->whys == std::vector<std::string>{"requested"});
  h.hang->OnHung(1, 1001, "stopped");
  h.hang->OnHung(2, 1002, "stopped");
  CHECK(h.collector->whys.size() == 1);
  CHECK(h.workers.kills.empty());
  h.AnswerAll();
  // That dump is their verdict: both killed with the diagnosis.
  REQUIRE(h.workers.kills.size() == 2);
  CHECK(h.workers.kills[0] == std::make_pair(1, std::string(kVerdict)));
  CHECK(h.workers.kills[1] == std::make_pair(2, std::string(kVerdict)));
}

TEST_CASE("HangResponse: a dump on demand kills nothing", "[agent][stacks]") {
  Harness h;
  h.hang->DumpStacks();
  h.hang->DumpStacks();  // one at a time
  CHECK(h.collector->whys.size() == 1);
  h.AnswerAll();
  CHECK(h.workers.kills.empty());
  CHECK(h.console.err.find("  rank 1 (pid 1001): data.py:88 in load") !=
        std::string::npos);
  // Not the verdict of a hang: a hang found later is collected anew.
  h.hang->OnHung(1, 1001, "stopped");
  CHECK(h.collector->whys.size() == 2);
  CHECK(h.workers.kills.empty());
}

TEST_CASE("HangResponse: no stacks without a collector, a file or a worker",
          "[agent][stacks]") {
  SECTION("DDPRUN_STACKS=0: killed at once, dumps refused, requests answered") {
    Harness h(/*stacks=*/false);
    CHECK_FALSE(h.hang->collects_stacks());
    h.hang->OnHung(1, 1001, "stopped");
    CHECK(h.workers.kills == std::vector<std::pair<int, std::string>>{{1, ""}});
    h.hang->DumpStacks();
    h.hang->OnStacksRequested(7, "operator");
    REQUIRE(h.rendezvous.answers.size() == 1);
    CHECK(h.rendezvous.answers[0].request_id == 7);
    CHECK(h.rendezvous.answers[0].ranks.empty());
    CHECK(h.console.err.empty());
  }
  SECTION("a worker without a stacks file is killed at once") {
    Harness h;
    h.workers.running.erase(h.workers.running.begin() + 1);
    h.hang->OnHung(1, 1001, "stopped");
    CHECK(h.collector->whys.empty());
    CHECK(h.workers.kills.size() == 1);
  }
  SECTION("no worker runs: a dump or a request collects nothing") {
    Harness h;
    h.workers.running.clear();
    h.hang->DumpStacks();
    h.hang->OnStacksRequested(8, "operator");
    CHECK(h.collector->whys.empty());
    REQUIRE(h.rendezvous.answers.size() == 1);
    CHECK(h.rendezvous.answers[0].ranks.empty());
  }
}

TEST_CASE("HangResponse: another node's request is collected and answered",
          "[agent][stacks]") {
  Harness h;
  h.TwoNodes();
  h.hang->OnStacksRequested(42, "watchdog on node 1: host-b");
  REQUIRE(h.collector->whys ==
          std::vector<std::string>{
              "requested by another node: watchdog on node 1: host-b"});
  CHECK(h.rendezvous.answers.empty());
  h.AnswerAll();
  REQUIRE(h.rendezvous.answers.size() == 1);
  CHECK(h.rendezvous.answers[0].request_id == 42);
  REQUIRE(h.rendezvous.answers[0].ranks.size() == 3);
  CHECK(h.rendezvous.answers[0].ranks[1].rank == 1);
  CHECK(h.rendezvous.answers[0].ranks[1].host == "host-a");
  // Asked, not asking: nothing gathered, nothing killed.
  CHECK(h.rendezvous.gathers.empty());
  CHECK(h.workers.kills.empty());
  // Asked again once the group's workers are gone: the stacks of a moment
  // ago, at once.
  h.workers.running.clear();
  h.hang->OnStacksRequested(43, "operator");
  REQUIRE(h.rendezvous.answers.size() == 2);
  CHECK(h.rendezvous.answers[1].ranks.size() == 3);
  CHECK(h.collector->whys.size() == 1);
}

TEST_CASE("HangResponse: across nodes nothing is killed before the gather",
          "[agent][stacks]") {
  Harness h;
  h.TwoNodes();
  h.hang->OnHung(1, 1001, "stopped");
  h.AnswerAll();
  REQUIRE(h.rendezvous.gathers.size() == 1);
  CHECK(h.rendezvous.gathers[0].reason == "watchdog on node 0: host-a");
  CHECK(h.rendezvous.gathers[0].own.size() == 3);
  CHECK(h.rendezvous.gathers[0].deadline == h.loop.clock()->Now() + 5s);
  CHECK(h.workers.kills.empty());
  CHECK(h.console.err.empty());
  // Another node's request meanwhile: this node's stacks, at once.
  h.hang->OnStacksRequested(9, "operator");
  REQUIRE(h.rendezvous.answers.size() == 1);
  CHECK(h.rendezvous.answers[0].ranks.size() == 3);
  // Another hang meanwhile waits for the same verdict.
  h.hang->OnHung(2, 1002, "stopped");
  CHECK(h.collector->whys.size() == 1);
  CHECK(h.workers.kills.empty());
  SECTION("every node's stacks, one missing node named") {
    rendezvous::StacksAnswer answer;
    answer.complete = false;
    answer.ranks = h.rendezvous.gathers[0].own;
    answer.missing_nodes = {"node-c (10.0.0.3)"};
    h.rendezvous.AnswerGather(answer);
    h.loop.RunUntilIdle();
    REQUIRE(h.workers.kills.size() == 2);
    CHECK(h.workers.kills[1].first == 2);
    const std::string& verdict = h.workers.kills[0].second;
    CHECK(verdict.find("rank 1 (node 0: host-a, pid 1001) is in data.py:88") !=
          std::string::npos);
    CHECK(verdict.find("(no stacks within 5.0 s from node-c (10.0.0.3))") !=
          std::string::npos);
    CHECK(h.console.err.find("<log_dir of each node>/attempt_0/<local_rank>/"
                             "stacks.txt") != std::string::npos);
  }
  SECTION("the gather fails: this node's stacks, labelled, say so") {
    h.rendezvous.AnswerGather(UnavailableError("server gone"));
    h.loop.RunUntilIdle();
    REQUIRE(h.workers.kills.size() == 2);
    const std::string& verdict = h.workers.kills[0].second;
    CHECK(verdict.find("rank 1 (node 0: host-a, pid 1001) is in data.py:88") !=
          std::string::npos);
    CHECK(verdict.find("the other nodes' stacks are unknown (server gone)") !=
          std::string::npos);
  }
  CHECK(h.hostname_lookups == 1);  // resolved once
}

TEST_CASE("HangResponse: a dump of a group that is gone is dropped",
          "[agent][stacks]") {
  Harness h;
  h.hang->OnHung(1, 1001, "stopped");
  h.hang->OnStacksRequested(5, "operator");  // answered with the collection
  h.hang->StartGroup(h.round);               // the group restarted
  h.hang->OnHung(2, 1002, "stopped");        // waits: the collector is busy
  h.AnswerAll();
  // The old group's worker is not killed again; the new group's hang is
  // killed without a verdict made of the old group's stacks.
  CHECK(h.workers.kills == std::vector<std::pair<int, std::string>>{{2, ""}});
  REQUIRE(h.rendezvous.answers.size() == 1);
  CHECK(h.rendezvous.answers[0].request_id == 5);
  CHECK(h.rendezvous.answers[0].ranks.empty());
  CHECK(h.console.err.empty());
}

TEST_CASE("HangResponse: after Finish nothing is reported, killed or answered",
          "[agent][stacks]") {
  Harness h;
  h.TwoNodes();
  h.hang->OnHung(1, 1001, "stopped");
  h.hang->Finish();
  h.AnswerAll();
  CHECK(h.rendezvous.gathers.empty());
  h.hang->OnHung(2, 1002, "stopped");
  h.hang->OnStacksRequested(3, "operator");
  h.hang->DumpStacks();
  CHECK(h.collector->whys.size() == 1);
  CHECK(h.workers.kills.empty());
  CHECK(h.rendezvous.answers.empty());
  CHECK(h.console.err.empty());
}

}  // namespace
}  // namespace ddprun::agent
