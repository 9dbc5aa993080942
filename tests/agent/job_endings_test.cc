// What a job leaves behind when it ends, with the real ddprun binary:
// workers' own children die with the job in every ending (success, failure,
// signal, kill -9 of ddprun) unless they were daemonised out of the
// worker's process group; the temporary log directory goes; a usage error
// is not retried; a bad --log_dir or an empty token is one error line.

#include "ddprun_catch.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/agent/process_harness.h"

namespace {

using namespace ddprun::test;  // NOLINT: the harness is the test's vocabulary

int PidIn(const std::string& path) { return std::atoi(ReadFile(path).c_str()); }

// Kills (SIGKILL) the pids recorded in `files` at scope exit: the
// daemonised processes the tests expect to survive the job.
class KillAtExit {
 public:
  explicit KillAtExit(std::vector<std::string> files)
      : files_(std::move(files)) {}
  ~KillAtExit() {
    for (const std::string& f : files_) {
      const int pid = PidIn(f);
      if (pid > 1) kill(pid, SIGKILL);
    }
  }

 private:
  std::vector<std::string> files_;
};

std::vector<std::string> Files(const TempDir& dir, const std::string& stem,
                               int n) {
  std::vector<std::string> files;
  for (int r = 0; r < n; ++r) {
    files.push_back(dir.path() + "/" + stem + "_" + std::to_string(r));
  }
  return files;
}

std::vector<int> Pids(const std::vector<std::string>& files) {
  std::vector<int> pids;
  for (const std::string& f : files) pids.push_back(PidIn(f));
  return pids;
}

bool AllAlive(const std::vector<int>& pids) {
  for (int p : pids) {
    if (p <= 1 || IsDead(p)) return false;
  }
  return true;
}

// The four endings of a job whose 2 workers each started a child in their
// process group and a daemon out of it.
enum class Ending { kSuccess, kFailure, kSignal, kKill9 };

void CheckEnding(Ending ending) {
  TempDir dir;
  const bool waits = ending == Ending::kSignal || ending == Ending::kKill9;
  const std::string end = ending == Ending::kSuccess   ? "exit0"
                          : ending == Ending::kFailure ? "exit1"
                                                       : "wait";
  const auto children = Files(dir, "child", 2);
  const auto daemons = Files(dir, "daemon", 2);
  KillAtExit cleanup(daemons);
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=2", "--max_restarts=0",
              "--no_python", kData + "/spawner.sh"},
             {{"SPAWNER_END", end}});
  std::vector<std::string> wait_for = children;
  wait_for.insert(wait_for.end(), daemons.begin(), daemons.end());
  if (waits) {
    const auto pids = Files(dir, "pid", 2);
    wait_for.insert(wait_for.end(), pids.begin(), pids.end());
  }
  REQUIRE(WaitForFiles(wait_for, 15s));
  int code = -1;
  switch (ending) {
    case Ending::kSuccess:
      code = run.Wait();
      CHECK(code == 0);
      break;
    case Ending::kFailure:
      code = run.Wait();
      CHECK(code == 1);
      break;
    case Ending::kSignal:
      kill(run.pid(), SIGTERM);
      code = run.Wait();
      CHECK(code == 128 + SIGTERM);
      break;
    case Ending::kKill9:
      kill(run.pid(), SIGKILL);
      code = run.Wait();
      CHECK(code == 128 + SIGKILL);
      CHECK(WaitDead(Pids(Files(dir, "pid", 2)), 5s));
      break;
  }
  INFO("ddprun exit " << code << "\n" << run.Stderr());
  // The workers' children in their groups are gone, within 5 s...
  CHECK(WaitDead(Pids(children), 5s));
  // ... and what they deliberately daemonised (setsid) lives on.
  CHECK(AllAlive(Pids(daemons)));
}

TEST_CASE("ddprun: a worker's children die with a job that succeeds",
          "[agent][process][endings]") {
  CheckEnding(Ending::kSuccess);
}

TEST_CASE("ddprun: a worker's children die with a job that fails",
          "[agent][process][endings]") {
  CheckEnding(Ending::kFailure);
}

TEST_CASE("ddprun: a worker's children die with a job stopped by SIGTERM",
          "[agent][process][endings]") {
  CheckEnding(Ending::kSignal);
}

TEST_CASE("ddprun: a worker's children die when ddprun is killed with -9",
          "[agent][process][endings]") {
  CheckEnding(Ending::kKill9);
}

// Entries of `dir` whose name starts with "torchelastic_".
std::vector<std::string> TempLogDirs(const std::string& dir) {
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("torchelastic_", 0) == 0) found.push_back(name);
    }
    closedir(d);
  }
  return found;
}

TEST_CASE(
    "ddprun: the temporary log directory goes with the run unless it holds "
    "logs",
    "[agent][process][endings]") {
  TempDir dir;
  const std::string tmp = dir.path() + "/tmp";
  REQUIRE(mkdir(tmp.c_str(), 0755) == 0);
  const std::map<std::string, std::string> env = {{"TMPDIR", tmp}};
  {
    Ddprun ok(dir,
              {"--standalone", "--nproc_per_node=2", "--no_python",
               kData + "/env_dump.sh"},
              env);
    CHECK(ok.Wait() == 0);
    CHECK(TempLogDirs(tmp).empty());
  }
  {
    Ddprun failed(dir,
                  {"--standalone", "--no_python", kData + "/exit_codes.sh"},
                  {{"TMPDIR", tmp}, {"EXIT_CODES", "1"}});
    CHECK(failed.Wait() == 1);
    CHECK(TempLogDirs(tmp).empty());
  }
  {
    // kill -9: the guard process removes it.
    Ddprun killed(dir, {"--standalone", "--no_python", kData + "/sleeper.sh"},
                  env);
    REQUIRE(WaitForFiles({dir.path() + "/pid_0"}, 15s));
    CHECK(TempLogDirs(tmp).size() == 1);
    kill(killed.pid(), SIGKILL);
    CHECK(killed.Wait() == 128 + SIGKILL);
    CHECK(ddprun::testing::WaitUntil(
        [&] { return TempLogDirs(tmp).empty(); }, 5s));
  }
  {
    // -r 3 wrote the workers' logs there: kept, and said where.
    Ddprun logs(
        dir, {"--standalone", "-r", "3", "--no_python", kData + "/env_dump.sh"},
        env);
    CHECK(logs.Wait() == 0);
    CHECK(TempLogDirs(tmp).size() == 1);
    CHECK(logs.Stderr().find("worker logs are kept in " + tmp +
                             "/torchelastic_") != std::string::npos);
  }
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST_CASE("ddprun: exit code 2 on the first attempt is not retried",
          "[agent][process][endings]") {
  TempDir dir;
  Ddprun run(dir,
             {"--standalone", "--max_restarts=3", "--no_python",
              kData + "/exit_codes.sh"},
             {{"EXIT_CODES", "2"}});
  CHECK(run.Wait() == 1);
  CHECK(Count(ReadFile(dir.path() + "/starts"), "attempt") == 1);
  const std::string err = run.Stderr();
  CHECK(Count(err, "usage: train.py") == 1);
  CHECK(Count(err,
              "not retried: local_rank 0 exited with code 2 on the first "
              "attempt") == 1);
  CHECK(err.find("Root Cause") != std::string::npos);  // the failure table
}

TEST_CASE("ddprun: --retry_usage_errors retries exit code 2 as torchrun does",
          "[agent][process][endings]") {
  TempDir dir;
  Ddprun run(dir,
             {"--standalone", "--max_restarts=3", "--retry_usage_errors",
              "--no_python", kData + "/exit_codes.sh"},
             {{"EXIT_CODES", "2"}});
  CHECK(run.Wait(30s) == 1);
  CHECK(Count(ReadFile(dir.path() + "/starts"), "attempt") == 4);
  CHECK(run.Stderr().find("not retried") == std::string::npos);
}

TEST_CASE("ddprun: exit code 2 after a first attempt is retried",
          "[agent][process][endings]") {
  TempDir dir;
  Ddprun run(dir,
             {"--standalone", "--max_restarts=2", "--no_python",
              kData + "/exit_codes.sh"},
             {{"EXIT_CODES", "1,2,0"}});
  CHECK(run.Wait(30s) == 0);
  CHECK(Count(ReadFile(dir.path() + "/starts"), "attempt") == 3);
}

// ddprun run to its exit; stderr in `*err`.
int RunToExit(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env, std::string* err) {
  TempDir dir;
  Ddprun run(dir, args, env);
  const int code = run.Wait();
  *err = run.Stderr();
  return code;
}

TEST_CASE("ddprun: a --log_dir that is a file is one error line, exit 2",
          "[agent][process][endings]") {
  TempDir dir;
  const std::string file = dir.path() + "/not_a_dir";
  std::ofstream(file) << "x";
  std::string err;
  CHECK(RunToExit({"--standalone", "--log_dir", file, "--no_python", "true"},
                  {}, &err) == 2);
  CHECK(err == "ddprun: error: --log_dir " + file +
                   ": exists and is not a directory\n");
}

TEST_CASE("ddprun: an empty rendezvous token is one error line, exit 2",
          "[agent][process][endings]") {
  TempDir dir;
  const std::string empty = dir.path() + "/token";
  std::ofstream(empty) << "\n";
  chmod(empty.c_str(), 0600);
  const std::vector<std::string> grpc = {"--nnodes=2", "--rdzv_backend=grpc",
                                         "--rdzv_endpoint=127.0.0.1:1",
                                         "--no_python", "true"};
  std::string err;
  CHECK(RunToExit(grpc, {{"DDPRUN_RDZV_TOKEN", ""}}, &err) == 2);
  CHECK(err.rfind("ddprun: error: DDPRUN_RDZV_TOKEN is set but empty", 0) == 0);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  std::vector<std::string> with_file = grpc;
  with_file.insert(with_file.begin(), "--rdzv_conf=token_file=" + empty);
  CHECK(RunToExit(with_file, {}, &err) == 2);
  CHECK(err.rfind("ddprun: error: rdzv_conf token_file=", 0) == 0);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

}  // namespace
