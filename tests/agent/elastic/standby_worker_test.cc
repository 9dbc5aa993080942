// --standby_workers (agent/elastic/standby_worker.h): the agent's standby
// process beside a running group under --restart_scope failed, driven by
// hand on the fakes of restart_scope_harness.h. The standby's end of the
// channel is real (a socket the fake launcher hands the "child"); the test
// plays the standby on it.

#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <string>

#include "ddprun_catch.h"
#include "tests/agent/elastic/restart_scope_harness.h"

namespace ddprun::agent {
namespace {

using testing::FakeWorker;
using testing::Harness;

struct StandbyHarness : Harness {
  StandbyHarness() : Harness(2, 3) { options.launch.standby_workers = true; }

  // The launched process with DDPRUN_STANDBY_FD, the newest.
  FakeWorker* Standby() {
    for (auto it = launcher.workers.rbegin(); it != launcher.workers.rend();
         ++it) {
      if ((*it)->spec.env.count("DDPRUN_STANDBY_FD")) return it->get();
    }
    return nullptr;
  }
  size_t IndexOf(const FakeWorker* w) const {
    for (size_t i = 0; i < launcher.workers.size(); ++i) {
      if (launcher.workers[i].get() == w) return i;
    }
    return launcher.workers.size();
  }
  static void SayReady(FakeWorker* standby) {
    REQUIRE(standby->fds.size() == 1);
    REQUIRE(::write(standby->fds[0], "ready\n", 6) == 6);
  }
  // What the agent sent the standby, as an environment (empty: nothing).
  static EnvMap Received(FakeWorker* standby) {
    std::string message;
    char buf[4096];
    for (ssize_t n;
         (n = ::recv(standby->fds[0], buf, sizeof(buf), MSG_DONTWAIT)) > 0;) {
      message.append(buf, n);
    }
    EnvMap env;
    if (message.size() < 2 ||
        message.compare(message.size() - 2, 2, std::string("\0\0", 2)) != 0) {
      return env;
    }
    std::stringstream entries(message.substr(0, message.size() - 1));
    for (std::string entry; std::getline(entries, entry, '\0');) {
      const size_t eq = entry.find('=');
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    return env;
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("standby workers: one standby per node, with no rank of its own",
          "[agent][restart_scope][standby]") {
  StandbyHarness h;
  h.Start();
  REQUIRE(h.launcher.workers.size() == 3);
  FakeWorker* s = h.Standby();
  REQUIRE(s == h.launcher.workers[2].get());
  CHECK(s->spec.argv == h.launcher.workers[0]->spec.argv);
  for (const char* gone :
       {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_ERROR_FILE", "DDPRUN_GENERATION",
        "DDPRUN_STEP_FILE", "DDPRUN_STACKS_FILE"}) {
    INFO(gone);
    CHECK(s->spec.env.count(gone) == 0);
  }
  CHECK(s->env("WORLD_SIZE") == "2");
  CHECK(s->env("DDPRUN_RESTART_SCOPE") == "failed");
  REQUIRE(s->spec.inherit_fds.size() == 1);
  CHECK(s->env("DDPRUN_STANDBY_FD") == std::to_string(s->spec.inherit_fds[0]));
  // The job's end kills it.
  for (size_t i : {0, 1}) h.launcher.Exit(i, 0);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(s->signals == std::vector<int>{SIGKILL});
}

TEST_CASE("standby workers: a ready standby takes a killed rank over",
          "[agent][restart_scope][standby]") {
  StandbyHarness h;
  h.Start();
  FakeWorker* s = h.Standby();
  const size_t standby_index = h.IndexOf(s);
  // Before the takeover its output is the standby's, in its own files.
  s->callbacks.on_stdout("loading\n");
  StandbyHarness::SayReady(s);
  h.loop.RunUntilIdle();
  EnvMap expected = h.launcher.workers[1]->spec.env;
  h.Kill(1);
  // The standby is rank 1 now; nothing was launched (the next standby
  // waits for the heal: loading beside it would slow it).
  REQUIRE(h.launcher.workers.size() == 3);
  CHECK(h.agent->worker_pids()[1] == s->pid);
  CHECK(s->signals.empty());
  // Exactly what a new process for rank 1 would have got.
  expected["DDPRUN_GENERATION"] = "1";
  expected["DDPRUN_REPLACEMENT"] = "1";
  CHECK(StandbyHarness::Received(s) == expected);
  CHECK(h.console.err.find("[ddprun] rank 1 replaced (generation 1) by the "
                           "standby worker pid " +
                           std::to_string(s->pid) + ", ") != std::string::npos);
  // Its output is rank 1's from now on, on the console and in rank 1's
  // files; what it wrote as a standby stayed in the standby's file.
  s->callbacks.on_stdout("step 7\n");
  CHECK(h.console.out.find("[default1]:step 7\n") != std::string::npos);
  CHECK(h.console.out.find("loading") == std::string::npos);
  const std::string attempt = h.log_dir + "/job1";
  std::string standby_log;
  std::string run_dir;
  for (const auto& w : h.launcher.workers) {
    auto it = w->spec.env.find("TORCHELASTIC_ERROR_FILE");
    if (it != w->spec.env.end() && w->env("LOCAL_RANK") == "1") {
      run_dir = it->second.substr(0, it->second.find("/attempt_0/"));
    }
  }
  REQUIRE_FALSE(run_dir.empty());
  CHECK(ReadFile(run_dir + "/attempt_0/standby/stdout.log") == "loading\n");
  // Its exit is rank 1's: healed, then everyone finishes.
  h.Heal(1);
  CHECK(h.console.err.find("[ddprun] rank 1 replaced (generation 1): healed "
                           "from rank 0") != std::string::npos);
  REQUIRE(h.launcher.workers.size() == 4);
  FakeWorker* next = h.Standby();
  CHECK(next == h.launcher.workers[3].get());
  h.launcher.Exit(0, 0);
  h.launcher.Exit(standby_index, 0);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(next->signals == std::vector<int>{SIGKILL});
}

TEST_CASE(
    "standby workers: a standby not yet ready is left alone and the rank "
    "starts afresh",
    "[agent][restart_scope][standby]") {
  StandbyHarness h;
  h.Start();
  FakeWorker* s = h.Standby();
  h.Kill(1);
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.launcher.workers[3]->env("RANK") == "1");
  CHECK(h.launcher.workers[3]->env("DDPRUN_GENERATION") == "1");
  CHECK(h.Standby() == s);
  CHECK(s->signals.empty());
  CHECK(StandbyHarness::Received(s).empty());
  CHECK(h.console.err.find("by the standby") == std::string::npos);
  // Ready later: the next failure takes it.
  h.Heal(1);
  StandbyHarness::SayReady(s);
  h.launcher.Exit(0, -SIGKILL);
  h.loop.RunUntilIdle();
  CHECK(h.agent->worker_pids()[0] == s->pid);
  CHECK(StandbyHarness::Received(s).at("RANK") == "0");
}

TEST_CASE(
    "standby workers: a standby that dies is started again, at most 3 "
    "times",
    "[agent][restart_scope][standby]") {
  StandbyHarness h;
  h.Start();
  for (int died = 1; died <= 4; ++died) {
    FakeWorker* s = h.Standby();
    REQUIRE(s != nullptr);
    h.launcher.Exit(h.IndexOf(s), 2);
    h.loop.RunUntilIdle();
    INFO("died " << died);
    CHECK(h.launcher.workers.size() == 2 + std::min(died + 1, 4));
  }
  CHECK(h.console.err.find("exited on its own (exit code 2) 4 times: this "
                           "node runs without one") != std::string::npos);
  // The workers never noticed; a failure now starts a new process.
  CHECK(h.agent->state() == WorkerState::kHealthy);
  h.Kill(1);
  CHECK(h.launcher.workers.back()->env("RANK") == "1");
}

TEST_CASE(
    "standby workers: a group restart kills the standby and the new "
    "round gets its own",
    "[agent][restart_scope][standby]") {
  StandbyHarness h;
  h.Start();
  FakeWorker* first = h.Standby();
  StandbyHarness::SayReady(first);
  // A node joins: the group restarts (a new round).
  REQUIRE(h.rendezvous.handler);
  h.rendezvous.handler(
      {rendezvous::RendezvousEventType::kMembershipChanged, "node b waiting"});
  h.loop.RunUntilIdle();
  CHECK(first->signals == std::vector<int>{SIGKILL});
  for (size_t i : {0, 1}) {
    CHECK(h.launcher.workers[i]->signals.front() == SIGTERM);
  }
  REQUIRE(h.launcher.workers.size() == 6);  // 2 ranks and a standby, twice
  FakeWorker* second = h.Standby();
  REQUIRE(second == h.launcher.workers[5].get());
  CHECK(h.agent->starts() == 2);
  // A signal to ddprun stops the group and the standby with it.
  h.agent->OnSignal(SIGTERM);
  h.loop.RunUntilIdle();
  CHECK(second->signals == std::vector<int>{SIGKILL});
}

}  // namespace ddprun::agent
