#pragma once

// What the agent tests of --restart_scope failed share: an in-memory
// workers' store and an agent on fakes (a manual event loop on a fake
// clock, a fake launcher, a fake rendezvous, a capturing console), with log
// files in a temporary folder. Nothing sleeps.

#include <stdlib.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/elastic/elastic_agent.h"
#include "agent/elastic/worker_store.h"
#include "tests/agent/agent_fakes.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::agent::testing {

using namespace std::chrono_literals;

// The workers' store as the agent sees it, with every Set in order.
class MemoryWorkerStore : public WorkerStore {
 public:
  StatusOr<bool> StartRound(const rendezvous::RendezvousResult&) override {
    ++rounds;
    keys.clear();
    if (!start_error.ok()) return start_error;
    return serves;
  }
  void Set(const std::string& key, std::string value) override {
    sets.push_back(key);
    if (remote) {
      pending.emplace_back(key, std::move(value));
      return;
    }
    keys[key] = std::move(value);
  }
  // Another node's store: a Set shows once the round trip is over.
  void Deliver() {
    for (auto& [key, value] : pending) keys[key] = std::move(value);
    pending.clear();
  }
  std::optional<std::string> Get(const std::string& key) const override {
    auto it = keys.find(key);
    if (it == keys.end()) return std::nullopt;
    return it->second;
  }

  bool serves = true;
  bool remote = false;
  std::vector<std::pair<std::string, std::string>> pending;
  Status start_error = Status::Ok();
  int rounds = 0;
  std::vector<std::string> sets;
  std::map<std::string, std::string> keys;
};

struct Harness {
  explicit Harness(int nproc, int max_restarts)
      : launcher(&loop), rendezvous(&loop) {
    char tmpl[] = "/tmp/ddprun_scope_test_XXXXXX";
    log_dir = mkdtemp(tmpl);
    options.launch.nproc_per_node = nproc;
    options.launch.max_restarts = max_restarts;
    options.launch.no_python = true;
    options.launch.entrypoint = "worker_bin";
    options.launch.restart_scope = LaunchOptions::RestartScope::kFailed;
    options.launch.heal_timeout_s = 10;
    options.run_id = "job1";
    options.run_log_dir = log_dir;
    options.hostname = "host-a";
    options.parent_env = {{"PATH", "/usr/bin"}};
    options.worker_store = &store;
    rendezvous.max_restarts = max_restarts;
  }
  ~Harness() { (void)!system(("rm -rf " + log_dir).c_str()); }

  void Start() {
    agent = std::make_unique<ElasticAgent>(options, &loop, &launcher,
                                           &rendezvous, &console);
    agent->Start([this](int code) { exit_code = code; });
    loop.RunUntilIdle();
  }

  // Local rank `local_rank` is killed; the agent acts on it.
  void Kill(int local_rank) {
    launcher.Exit(local_rank, -SIGKILL);
    loop.RunUntilIdle();
  }

  // The source rank marks generation `g` healed; the agent polls it.
  void Heal(int g) {
    store.keys["/ddprun/generation/" + std::to_string(g) + "/healed"] = "1";
    loop.Advance(100ms);
  }

  ddprun::testing::ManualEventLoop loop;
  FakeLauncher launcher;
  FakeRendezvous rendezvous;
  CaptureConsole console;
  MemoryWorkerStore store;
  AgentOptions options;
  std::string log_dir;
  std::unique_ptr<ElasticAgent> agent;
  std::optional<int> exit_code;
};

}  // namespace ddprun::agent::testing
