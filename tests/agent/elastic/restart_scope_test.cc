// --restart_scope failed, the agent's half (agent/elastic/rank_replacement.h,
// docs/restart_scope.md), driven by hand: a manual event loop on a fake
// clock, a fake launcher, a fake rendezvous and an in-memory workers'
// store. Nothing sleeps.

#include "ddprun_catch.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/elastic/elastic_agent.h"
#include "agent/elastic/worker_store.h"
#include "tests/agent/agent_fakes.h"
#include "tests/agent/elastic/restart_scope_harness.h"
#include "tests/agent/fake_worker_probe.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using ddprun::testing::ManualEventLoop;
using testing::CaptureConsole;
using testing::FakeLauncher;
using testing::FakeRendezvous;
using testing::FakeWorkerProbe;

using testing::Harness;
using testing::MemoryWorkerStore;

}  // namespace

TEST_CASE("restart scope failed: workers learn the scope and use the agent's "
          "store",
          "[agent][restart_scope]") {
  Harness h(2, 3);
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  for (const auto& w : h.launcher.workers) {
    CHECK(w->env("DDPRUN_RESTART_SCOPE") == "failed");
    CHECK(w->env("DDPRUN_GENERATION") == "0");
    CHECK(w->env("DDPRUN_HEAL_TIMEOUT_S") == "10");
    CHECK(w->env("TORCHELASTIC_USE_AGENT_STORE") == "True");
    CHECK(w->spec.env.count("DDPRUN_REPLACEMENT") == 0);
  }
  CHECK(h.store.rounds == 1);
}

TEST_CASE("restart scope failed: a killed rank is replaced alone and heals",
          "[agent][restart_scope]") {
  Harness h(3, 3);
  h.Start();
  REQUIRE(h.launcher.workers.size() == 3);
  h.launcher.Exit(1, -SIGKILL);
  h.loop.RunUntilIdle();
  // Only rank 1 started again; nobody was signalled.
  REQUIRE(h.launcher.workers.size() == 4);
  for (int i : {0, 2}) CHECK(h.launcher.workers[i]->signals.empty());
  const auto& r = *h.launcher.workers[3];
  CHECK(r.env("RANK") == "1");
  CHECK(r.env("LOCAL_RANK") == "1");
  CHECK(r.env("WORLD_SIZE") == "3");
  CHECK(r.env("TORCHELASTIC_RESTART_COUNT") == "0");
  CHECK(r.env("DDPRUN_GENERATION") == "1");
  CHECK(r.env("DDPRUN_REPLACEMENT") == "1");
  // The budget paid for it, the record was written before its number.
  CHECK(h.rendezvous.replaced_ranks == std::vector<int>{1});
  CHECK(h.rendezvous.replace_generations == std::vector<int64_t>{1});
  CHECK(h.rendezvous.restarts_used == 1);
  REQUIRE(h.store.sets == std::vector<std::string>{"/ddprun/generation/1",
                                                   "/ddprun/generation"});
  CHECK(h.store.keys["/ddprun/generation"] == "1");
  const std::string record = h.store.keys["/ddprun/generation/1"];
  CHECK(record.find("\"replaced\":[1]") != std::string::npos);
  CHECK(record.find("\"source\":0") != std::string::npos);
  CHECK(record.find("killed by SIGKILL") != std::string::npos);
  CHECK(h.agent->state() == WorkerState::kHealthy);
  CHECK(h.console.err.find("healed") == std::string::npos);

  h.Heal(1);
  CHECK(h.console.err.find("[ddprun] rank 1 replaced (generation 1): healed "
                           "from rank 0 in") != std::string::npos);
  REQUIRE(h.rendezvous.healed.size() == 1);
  CHECK(h.rendezvous.healed[0].rank == 1);
  CHECK(h.rendezvous.healed[0].generation == 1);

  // A second, later failure is generation 2, healed from rank 0 again.
  h.launcher.Exit(0, 1);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 5);
  CHECK(h.launcher.workers[4]->env("RANK") == "0");
  CHECK(h.launcher.workers[4]->env("DDPRUN_GENERATION") == "2");
  CHECK(h.store.keys["/ddprun/generation/2"].find("\"source\":1") !=
        std::string::npos);
  h.Heal(2);

  for (size_t i : {2, 3, 4}) h.launcher.Exit(i, 0);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(h.agent->starts() == 1);
  CHECK(h.rendezvous.joins == 1);
}

TEST_CASE("restart scope failed: a heal past --heal_timeout restarts the group",
          "[agent][restart_scope]") {
  Harness h(2, 3);
  h.Start();
  h.launcher.Exit(1, -SIGKILL);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 3);
  h.loop.Advance(9s);
  CHECK(h.launcher.workers[0]->signals.empty());
  h.loop.Advance(2s);
  // Both running processes were stopped, the group starts again.
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  CHECK(h.launcher.workers[2]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();  // SIGTERM ended them
  REQUIRE(h.launcher.workers.size() == 5);
  for (const auto& w : h.launcher.Latest(2)) {
    CHECK(w->env("DDPRUN_GENERATION") == "0");
    CHECK(w->spec.env.count("DDPRUN_REPLACEMENT") == 0);
  }
  CHECK(h.agent->starts() == 2);
  CHECK(h.store.rounds == 2);
}

TEST_CASE("restart scope failed: a second failure while healing restarts the "
          "group",
          "[agent][restart_scope]") {
  Harness h(3, 5);
  h.Start();
  h.launcher.Exit(1, -SIGKILL);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 4);
  h.launcher.Exit(2, 1);  // before generation 1 healed
  h.loop.RunUntilIdle();
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  CHECK(h.launcher.workers[3]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();  // SIGTERM ended them
  REQUIRE(h.launcher.workers.size() == 7);
  CHECK(h.agent->starts() == 2);
  CHECK(h.rendezvous.failure_reasons.size() == 1);
}

TEST_CASE("restart scope failed: with no restart left the job fails as under "
          "group",
          "[agent][restart_scope]") {
  Harness h(2, 0);
  h.Start();
  h.launcher.Exit(1, 1);
  h.loop.RunUntilIdle();
  CHECK(h.rendezvous.replaced_ranks == std::vector<int>{1});
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();  // SIGTERM ended them
  CHECK(h.exit_code == 1);
  CHECK(h.launcher.workers.size() == 2);
  CHECK(h.console.err.find("local_rank: 1") != std::string::npos);
}

TEST_CASE("restart scope failed: a rendezvous without ReplaceRank restarts the "
          "group",
          "[agent][restart_scope]") {
  Harness h(2, 3);
  h.rendezvous.replace_error =
      Status(StatusCode::kUnimplemented, "method ReplaceRank not found");
  h.Start();
  h.launcher.Exit(1, -SIGKILL);
  h.loop.RunUntilIdle();
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();  // SIGTERM ended them
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.agent->starts() == 2);
}

TEST_CASE("restart scope failed: the generation is the rendezvous's when it "
          "hands them out",
          "[agent][restart_scope]") {
  Harness h(2, 5);
  h.rendezvous.allocate_generations = true;
  h.rendezvous.allocated = 4;  // another node's ranks were replaced 4 times
  h.Start();
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 3);
  CHECK(h.launcher.workers[2]->env("DDPRUN_GENERATION") == "5");
  CHECK(h.store.keys["/ddprun/generation"] == "5");
  CHECK(h.store.keys.count("/ddprun/generation/5") == 1);
  h.Heal(5);
  CHECK(h.console.err.find("rank 1 replaced (generation 5)") !=
        std::string::npos);
  CHECK(h.rendezvous.healed.size() == 1);
}

TEST_CASE("restart scope failed: a rank that fails while another node's rank "
          "heals restarts the group",
          "[agent][restart_scope]") {
  Harness h(2, 5);
  h.rendezvous.healing_rank = 7;
  h.Start();
  h.Kill(1);
  // Asked, refused without spending: the group stops and restarts.
  CHECK(h.rendezvous.replaced_ranks == std::vector<int>{1});
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.agent->starts() == 2);
  CHECK(h.store.sets.empty());
}

TEST_CASE("restart scope failed: through another node's store the replacement "
          "starts once the generation shows there",
          "[agent][restart_scope]") {
  Harness h(2, 5);
  h.store.remote = true;
  h.Start();
  h.Kill(1);
  // Written, not yet visible: the replacement waits (a worker reading its
  // generation's record first would find none).
  REQUIRE(h.store.sets.size() == 2);
  h.loop.Advance(20ms);
  CHECK(h.launcher.workers.size() == 2);
  h.store.Deliver();
  h.loop.Advance(10ms);
  REQUIRE(h.launcher.workers.size() == 3);
  CHECK(h.launcher.workers[2]->env("DDPRUN_GENERATION") == "1");
  CHECK(h.launcher.workers[0]->signals.empty());
  h.Heal(1);
  CHECK(h.console.err.find("rank 1 replaced (generation 1)") !=
        std::string::npos);
}

TEST_CASE(
    "restart scope failed: with DDPRUN_GENERATION_SIGNAL the "
    "replacing node's survivors get the signal once, the replacement "
    "does not",
    "[agent][restart_scope]") {
  Harness h(3, 5);
  h.options.generation_signal = SIGUSR1;
  h.rendezvous.allocate_generations = true;
  h.Start();
  const int64_t round = h.rendezvous.round - 1;  // the round joined
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.launcher.workers[0]->signals == std::vector<int>{SIGUSR1});
  CHECK(h.launcher.workers[2]->signals == std::vector<int>{SIGUSR1});
  CHECK(h.launcher.workers[3]->signals.empty());
  // The rendezvous tells this node of its own generation too: not again.
  h.rendezvous.AnnounceGeneration(round, 1);
  h.loop.RunUntilIdle();
  CHECK(h.launcher.workers[0]->signals.size() == 1);
  CHECK(h.launcher.workers[3]->signals.empty());
  h.Heal(1);
}

TEST_CASE(
    "restart scope failed: with DDPRUN_GENERATION_SIGNAL another "
    "node's generation reaches every worker once the store shows it",
    "[agent][restart_scope]") {
  Harness h(2, 5);
  h.options.generation_signal = SIGUSR2;
  h.Start();
  const int64_t round = h.rendezvous.round - 1;  // the round joined
  auto signals = [&h](size_t i) { return h.launcher.workers[i]->signals; };
  // Handed out by the rendezvous, not yet written by the other node: a
  // worker reading "/ddprun/generation" on the signal would not find it.
  h.rendezvous.AnnounceGeneration(round, 1);
  h.loop.RunUntilIdle();
  h.loop.Advance(100ms);
  CHECK(signals(0).empty());
  h.store.keys["/ddprun/generation"] = "1";
  h.loop.Advance(20ms);
  CHECK(signals(0) == std::vector<int>{SIGUSR2});
  CHECK(signals(1) == std::vector<int>{SIGUSR2});
  // An older or the same generation, another round's: nothing.
  h.rendezvous.AnnounceGeneration(round, 1);
  h.rendezvous.AnnounceGeneration(round + 7, 5);
  h.loop.RunUntilIdle();
  h.store.keys["/ddprun/generation"] = "5";
  h.loop.Advance(100ms);
  CHECK(signals(0).size() == 1);
  // One that never reaches the store is given up after the heal timeout,
  // without a signal, and the group runs on.
  h.rendezvous.AnnounceGeneration(round, 6);
  h.loop.RunUntilIdle();
  h.loop.Advance(11s);
  CHECK(signals(0).size() == 1);
  CHECK(h.agent->state() == WorkerState::kHealthy);
  // Two announced before the store shows either: one signal, for the newer.
  h.rendezvous.AnnounceGeneration(round, 7);
  h.rendezvous.AnnounceGeneration(round, 8);
  h.loop.RunUntilIdle();
  h.store.keys["/ddprun/generation"] = "8";
  h.loop.Advance(20ms);
  CHECK(signals(0) == std::vector<int>{SIGUSR2, SIGUSR2});
  CHECK(signals(1) == std::vector<int>{SIGUSR2, SIGUSR2});
}

TEST_CASE(
    "restart scope failed: without DDPRUN_GENERATION_SIGNAL no worker "
    "is signalled, whatever the rendezvous announces",
    "[agent][restart_scope]") {
  Harness h(2, 5);
  h.Start();
  h.store.keys["/ddprun/generation"] = "3";
  if (h.rendezvous.generation_handler) {
    h.rendezvous.AnnounceGeneration(h.rendezvous.round - 1, 3);
  }
  h.loop.RunUntilIdle();
  h.loop.Advance(100ms);
  CHECK(h.launcher.workers[0]->signals.empty());
  CHECK(h.launcher.workers[1]->signals.empty());
}

TEST_CASE(
    "restart scope failed: a node that takes a lost node's place "
    "starts every rank as a replacement once the store shows the "
    "generation, and heals",
    "[agent][restart_scope]") {
  Harness h(2, 5);
  h.store.remote = true;
  h.rendezvous.join_rank_offset = 2;
  h.rendezvous.join_replaces_generation = 3;
  h.Start();
  CHECK(h.rendezvous.last_request.replace_lost_nodes);
  // A lost node's place may stay open half --heal_timeout (10 s): the
  // survivors' workers wait that long to re-form.
  CHECK(h.rendezvous.last_request.replace_wait == std::chrono::seconds(5));
  // The record names both ranks, healed from rank 0; nothing runs until
  // the other node's store shows the number.
  REQUIRE(h.store.sets == std::vector<std::string>{"/ddprun/generation/3",
                                                   "/ddprun/generation"});
  CHECK(h.launcher.workers.empty());
  h.store.Deliver();
  const std::string record = h.store.keys["/ddprun/generation/3"];
  CHECK(record.find("\"replaced\":[2,3]") != std::string::npos);
  CHECK(record.find("\"source\":0") != std::string::npos);
  h.loop.Advance(10ms);
  REQUIRE(h.launcher.workers.size() == 2);
  for (int i : {0, 1}) {
    const auto& w = *h.launcher.workers[i];
    CHECK(w.env("RANK") == std::to_string(2 + i));
    CHECK(w.env("WORLD_SIZE") == "4");
    CHECK(w.env("DDPRUN_GENERATION") == "3");
    CHECK(w.env("DDPRUN_REPLACEMENT") == "1");
  }
  h.Heal(3);
  CHECK(h.console.err.find("[ddprun] ranks 2-3 replaced (generation 3): "
                           "healed from rank 0 in") != std::string::npos);
  REQUIRE(h.rendezvous.healed.size() == 1);
  CHECK(h.rendezvous.healed[0].rank == 2);
  CHECK(h.rendezvous.healed[0].generation == 3);
  // A rank of it that fails before making a step since it healed restarts
  // the group, as a replaced rank does.
  h.Kill(1);
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();
  CHECK(h.agent->starts() == 2);
}

TEST_CASE(
    "restart scope failed: a lost node's place that does not heal "
    "restarts the group after --heal_timeout",
    "[agent][restart_scope]") {
  Harness h(2, 5);
  h.rendezvous.join_rank_offset = 2;
  h.rendezvous.join_replaces_generation = 1;
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  h.rendezvous.join_replaces_generation = 0;
  h.loop.Advance(11s);
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();
  REQUIRE(h.rendezvous.failure_reasons.size() == 1);
  CHECK_THAT(h.rendezvous.failure_reasons[0],
             Catch::Contains("ranks 2-3 (generation 1) did not heal"));
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.launcher.workers[2]->env("DDPRUN_GENERATION") == "0");
  CHECK(h.agent->starts() == 2);
}

TEST_CASE("restart scope failed: a generation that never reaches the store "
          "restarts the group after --heal_timeout",
          "[agent][restart_scope]") {
  Harness h(2, 5);
  h.store.remote = true;
  h.Start();
  h.Kill(1);
  h.loop.Advance(9s);
  CHECK(h.launcher.workers.size() == 2);
  CHECK(h.launcher.workers[0]->signals.empty());
  h.loop.Advance(2s);
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.agent->starts() == 2);
}

TEST_CASE("restart scope failed: a node that does not serve the store "
          "restarts the group",
          "[agent][restart_scope]") {
  Harness h(2, 3);
  h.store.serves = false;
  h.Start();
  h.launcher.Exit(0, 1);
  h.loop.RunUntilIdle();
  CHECK(h.rendezvous.replaced_ranks.empty());
  CHECK(h.launcher.workers[1]->signals.front() == SIGTERM);
}

TEST_CASE("restart scope failed: a store that cannot be served is a launch "
          "error",
          "[agent][restart_scope]") {
  Harness h(2, 3);
  h.store.start_error =
      Status(StatusCode::kUnavailable, "127.0.0.1:29500 is in use");
  h.Start();
  CHECK(h.launcher.workers.empty());
  CHECK(h.exit_code == 1);
}

TEST_CASE("restart scope failed: a rank whose peers finished is not replaced",
          "[agent][restart_scope]") {
  Harness h(2, 3);
  h.Start();
  h.launcher.Exit(0, 0);
  h.launcher.Exit(1, -SIGKILL);
  h.loop.RunUntilIdle();
  CHECK(h.rendezvous.replaced_ranks.empty());
  REQUIRE(h.launcher.workers.size() == 4);  // the group restarted
  CHECK(h.agent->starts() == 2);
}

TEST_CASE("restart scope failed: the watchdog kills a stopped worker alone, "
          "the ones waiting for it are spared",
          "[agent][restart_scope][watchdog]") {
  Harness h(3, 3);
  FakeWorkerProbe probe;
  h.options.launch.watchdog_timeout_s = 2;
  h.options.watchdog_probe = &probe;
  h.Start();
  REQUIRE(h.launcher.workers.size() == 3);
  const std::string beat = h.log_dir + "/attempt_0/";
  for (int lr = 0; lr < 3; ++lr) {
    probe.Touch(beat + std::to_string(lr) + "/heartbeat");
  }
  h.loop.Advance(500ms);
  // Rank 1 stops; ranks 0 and 2 wait for it in a collective: no beats.
  probe.stopped.insert(h.launcher.workers[1]->pid);
  for (int i = 0; i < 30; ++i) h.loop.Advance(100ms);
  REQUIRE_FALSE(h.launcher.workers[1]->signals.empty());
  CHECK(h.launcher.workers[1]->signals.front() == SIGKILL);
  CHECK(h.launcher.workers[0]->signals.empty());
  CHECK(h.launcher.workers[2]->signals.empty());
  // Replaced alone.
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.launcher.workers[3]->env("RANK") == "1");
  CHECK(h.launcher.workers[3]->env("DDPRUN_REPLACEMENT") == "1");
  h.Heal(1);
  CHECK(h.console.err.find("rank 1 replaced (generation 1)") !=
        std::string::npos);
  // The spared ones are watched again: a later silence of rank 0 is a hang
  // of its own.
  probe.Touch(beat + "0/heartbeat");
  for (int i = 0; i < 5; ++i) h.loop.Advance(100ms);
  for (int lr : {2, 1}) probe.Touch(beat + std::to_string(lr) + "/heartbeat");
  for (int i = 0; i < 30; ++i) {
    probe.Touch(beat + "2/heartbeat");
    probe.Touch(beat + "1/heartbeat");
    h.loop.Advance(100ms);
  }
  REQUIRE_FALSE(h.launcher.workers[0]->signals.empty());
  CHECK(h.launcher.workers[0]->signals.front() == SIGKILL);
}

}  // namespace ddprun::agent

// The replacement's record in the rank's directory (replacement_record.h,
// docs/restart_scope.md "On disk").
namespace ddprun::agent {
namespace {

std::string RankDir(const Harness& h, int attempt, int local_rank) {
  return h.log_dir + "/attempt_" + std::to_string(attempt) + "/" +
         std::to_string(local_rank);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(Slurp(path), nullptr, false);
}

// Every path under `dir` (files and folders), relative to it.
void ListTree(const std::string& dir, const std::string& prefix,
              std::vector<std::string>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    out->push_back(prefix + name);
    ListTree(dir + "/" + name, prefix + name + "/", out);
  }
  ::closedir(d);
}

const char kErrorFile[] =
    R"({"message": {"message": "RuntimeError: boom", "extraInfo": )"
    R"({"py_callstack": "Traceback: f", "timestamp": "1700000123"}}})";

}  // namespace

TEST_CASE("restart scope failed: a replaced rank's directory records the "
          "replacement and its heal",
          "[agent][restart_scope][replacement_record]") {
  Harness h(3, 3);
  h.Start();
  REQUIRE(h.launcher.workers.size() == 3);
  const std::string dir = RankDir(h, 0, 1);
  WriteText(dir + "/error.json", kErrorFile);
  const int failed_pid = h.launcher.workers[1]->pid;
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 4);  // replaced alone

  // Written before the replacement started; the failed process's error
  // file moved out of the replacement's way.
  nlohmann::json record = ReadJson(dir + "/replaced_g1.json");
  REQUIRE(record.is_object());
  CHECK(record["rank"] == 1);
  CHECK(record["local_rank"] == 1);
  CHECK(record["generation"] == 1);
  CHECK(record["reason"] ==
        "local rank 1 (pid " + std::to_string(failed_pid) +
            ") killed by SIGKILL");
  CHECK(record["pid"] == failed_pid);
  CHECK(record["exitcode"] == -SIGKILL);
  CHECK(record["failed_at"] == 1700000123);  // the error file's timestamp
  CHECK(record["error"] == nlohmann::json::parse(kErrorFile));
  REQUIRE(record.contains("heal"));
  CHECK(record["heal"].is_null());
  CHECK_FALSE(Exists(dir + "/error.json"));
  CHECK(Slurp(dir + "/error.replaced_g1.json") == kErrorFile);
  // The replacement is told the same path: it writes a clean file there.
  CHECK(h.launcher.workers[3]->env("TORCHELASTIC_ERROR_FILE") ==
        dir + "/error.json");

  h.Heal(1);
  record = ReadJson(dir + "/replaced_g1.json");
  REQUIRE(record["heal"].is_object());
  CHECK(record["heal"]["source"] == 0);
  const double seconds = record["heal"]["seconds"].get<double>();
  CHECK(seconds > 0);
  CHECK(seconds <= 0.1);  // the fake clock moved 100 ms
  CHECK(record["error"] == nlohmann::json::parse(kErrorFile));

  // The replacement steps, then fails with an error file of its own: the
  // next generation has a record of its own, the first one stays.
  WriteText(dir + "/steps", "5\n");
  const char kSecond[] =
      R"({"message": {"message": "ValueError: again", "extraInfo": )"
      R"({"py_callstack": "tb", "timestamp": "1700000999"}}})";
  WriteText(dir + "/error.json", kSecond);
  h.launcher.Exit(3, 1);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 5);
  nlohmann::json second = ReadJson(dir + "/replaced_g2.json");
  CHECK(second["generation"] == 2);
  CHECK(second["exitcode"] == 1);
  CHECK(second["failed_at"] == 1700000999);
  CHECK(second["error"]["message"]["message"] == "ValueError: again");
  CHECK(Slurp(dir + "/error.replaced_g2.json") == kSecond);
  CHECK(Slurp(dir + "/error.replaced_g1.json") == kErrorFile);
  CHECK_FALSE(Exists(dir + "/error.json"));
  CHECK(ReadJson(dir + "/replaced_g1.json")["heal"]["source"] == 0);
}

TEST_CASE("restart scope failed: a replacement that does not heal records "
          "why",
          "[agent][restart_scope][replacement_record]") {
  Harness h(2, 3);
  h.Start();
  const std::string dir = RankDir(h, 0, 1);
  h.Kill(1);  // no error file: killed
  REQUIRE(h.launcher.workers.size() == 3);
  nlohmann::json record = ReadJson(dir + "/replaced_g1.json");
  CHECK(record["exitcode"] == -SIGKILL);
  CHECK_FALSE(record.contains("error"));
  CHECK(record["heal"].is_null());
  CHECK(record["failed_at"].get<int64_t>() >= 1700000000);  // the fake wall
  CHECK_FALSE(Exists(dir + "/error.replaced_g1.json"));

  h.loop.Advance(11s);  // past --heal_timeout 10
  record = ReadJson(dir + "/replaced_g1.json");
  REQUIRE(record["heal"].is_object());
  CHECK(record["heal"]["failed"] ==
        "rank 1 (generation 1) did not heal within 10 s");
  CHECK_FALSE(record["heal"].contains("source"));
  h.loop.RunUntilIdle();  // the group restarts
  REQUIRE(h.launcher.workers.size() == 5);
  CHECK(h.agent->starts() == 2);
}

TEST_CASE("restart scope failed: a second failure while healing records "
          "that the group stopped",
          "[agent][restart_scope][replacement_record]") {
  Harness h(3, 5);
  h.Start();
  const std::string dir = RankDir(h, 0, 1);
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 4);
  h.launcher.Exit(2, 1);  // before generation 1 healed
  h.loop.RunUntilIdle();
  nlohmann::json record = ReadJson(dir + "/replaced_g1.json");
  REQUIRE(record["heal"].is_object());
  CHECK(record["heal"]["failed"] == "the group stopped (worker failure)");
  h.loop.RunUntilIdle();  // the group restarts in attempt 1
  CHECK(h.agent->starts() == 2);
  CHECK_FALSE(Exists(RankDir(h, 1, 1) + "/replaced_g1.json"));
}

TEST_CASE("restart scope failed: the failure table names the moved error "
          "file when the replacement gives up",
          "[agent][restart_scope][replacement_record]") {
  Harness h(2, 1);  // one restart: the replacement spends it
  h.Start();
  const std::string dir = RankDir(h, 0, 1);
  WriteText(dir + "/error.json", kErrorFile);
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 3);
  h.loop.Advance(11s);  // no heal: the failure is the group's, no restart
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 1);
  CHECK(ReadJson(dir + "/replaced_g1.json")["heal"].contains("failed"));
  CHECK(h.console.err.find("error_file: " + dir + "/error.replaced_g1.json") !=
        std::string::npos);
  CHECK(h.console.err.find("Traceback: f") != std::string::npos);
}

TEST_CASE("restart scope failed: without log files no record is written",
          "[agent][restart_scope][replacement_record]") {
  Harness h(2, 3);
  h.options.run_log_dir = "";  // --log_dir /dev/null
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  CHECK(h.launcher.workers[0]->env("TORCHELASTIC_ERROR_FILE").empty());
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 3);
  h.Heal(1);
  CHECK(h.console.err.find("rank 1 replaced (generation 1)") !=
        std::string::npos);
  std::vector<std::string> tree;
  ListTree(h.log_dir, "", &tree);
  CHECK(tree.empty());
}

TEST_CASE("restart scope failed: a record that cannot be written does not "
          "stop the replacement",
          "[agent][restart_scope][replacement_record]") {
  Harness h(2, 3);
  h.Start();
  const std::string dir = RankDir(h, 0, 1);
  // A folder where the record goes: the rename over it fails.
  REQUIRE(::mkdir((dir + "/replaced_g1.json").c_str(), 0755) == 0);
  WriteText(dir + "/error.json", kErrorFile);
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 3);
  CHECK(h.launcher.workers[2]->env("DDPRUN_REPLACEMENT") == "1");
  // Nothing recorded, so the error file stays where it was.
  CHECK(Slurp(dir + "/error.json") == kErrorFile);
  h.Heal(1);
  CHECK(h.console.err.find("rank 1 replaced (generation 1): healed") !=
        std::string::npos);
  CHECK(h.agent->starts() == 1);
}

}  // namespace ddprun::agent
