// Runs the real ddprun binary on the small workers in data/ and checks what a
// user would see: ranks and environment, restarts, exit codes, the failure
// table, log files, signals, and that no worker survives the agent.

#include "ddprun_catch.h"
#include "reaction_bound.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/agent/process_harness.h"

using namespace ddprun::test;  // NOLINT: the harness is the test's vocabulary

namespace {

std::vector<int> ReadPids(const TempDir& dir, int n) {
  std::vector<int> pids;
  for (int r = 0; r < n; ++r) {
    pids.push_back(
        std::atoi(ReadFile(dir.path() + "/pid_" + std::to_string(r)).c_str()));
  }
  return pids;
}

std::vector<std::string> PidFiles(const TempDir& dir, int n) {
  std::vector<std::string> files;
  for (int r = 0; r < n; ++r) {
    files.push_back(dir.path() + "/pid_" + std::to_string(r));
  }
  return files;
}

}  // namespace

TEST_CASE("ddprun: 4 workers get distinct ranks and torchrun's env",
          "[agent][process]") {
  TempDir dir;
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=4", "--no_python",
              kData + "/env_dump.sh", "a", "--b"},
             {{"OMP_NUM_THREADS", ""}});
  REQUIRE(run.Wait() == 0);
  std::set<std::string> ranks;
  std::string port, run_id;
  for (int r = 0; r < 4; ++r) {
    auto env = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    REQUIRE(env.count("RANK"));
    ranks.insert(env["RANK"]);
    CHECK(env["LOCAL_RANK"] == std::to_string(r));
    CHECK(env["GROUP_RANK"] == "0");
    CHECK(env["ROLE_RANK"] == std::to_string(r));
    CHECK(env["ROLE_NAME"] == "default");
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["LOCAL_WORLD_SIZE"] == "4");
    CHECK(env["ROLE_WORLD_SIZE"] == "4");
    CHECK(env["GROUP_WORLD_SIZE"] == "1");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "0");
    CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
    // A shell-script worker has no torch: what the newest torchrun sets.
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
    CHECK(env["TORCHELASTIC_SIGNALS_TO_HANDLE"] ==
          "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    CHECK(env["TORCHELASTIC_ERROR_FILE"].find(
              "/attempt_0/" + std::to_string(r) + "/error.json") !=
          std::string::npos);
    CHECK(env["DDPRUN_TEST_OUT"] == dir.path());  // inherited
    CHECK(ReadFile(dir.path() + "/args_" + std::to_string(r)) ==
          "args:a --b\n");
    if (r == 0) {
      port = env["MASTER_PORT"];
      run_id = env["TORCHELASTIC_RUN_ID"];
    }
    CHECK(env["MASTER_PORT"] == port);
    CHECK(env["TORCHELASTIC_RUN_ID"] == run_id);
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3"});
  CHECK(std::atoi(port.c_str()) > 0);
  CHECK(run_id != "none");  // --standalone: a fresh uuid
  std::string out = run.Stdout();
  for (int r = 0; r < 4; ++r) {
    CHECK(out.find("[default" + std::to_string(r) + "]:hello from " +
                   std::to_string(r) + "\n") != std::string::npos);
  }
  CHECK(run.Stderr().find("[default2]:warning from 2\n") != std::string::npos);
}

TEST_CASE("ddprun: OMP_NUM_THREADS defaults to 1 with torchrun's banner",
          "[agent][process]") {
  TempDir dir;
  std::string cmd = "unset OMP_NUM_THREADS; DDPRUN_TEST_OUT=" + dir.path() +
                    " " + kBin + " --nproc_per_node=2 --no_python " + kData +
                    "/env_dump.sh > /dev/null 2> " + dir.path() + "/err";
  REQUIRE(system(cmd.c_str()) == 0);
  auto env = ParseEnv(ReadFile(dir.path() + "/env_1"));
  CHECK(env["OMP_NUM_THREADS"] == "1");
  CHECK(
      ReadFile(dir.path() + "/err")
          .find("Setting OMP_NUM_THREADS environment variable for each process "
                "to be 1 in default") != std::string::npos);
}

TEST_CASE("ddprun: a failure on attempt 0 is restarted with max_restarts=1",
          "[agent][process]") {
  TempDir dir;
  Ddprun run(dir, {"--nproc_per_node=2", "--max_restarts=1", "--no_python",
                   kData + "/fail_once.sh"});
  REQUIRE(run.Wait() == 0);
  std::string out = run.Stdout();
  CHECK(out.find("[default1]:attempt 0 rank 1") != std::string::npos);
  CHECK(out.find("[default1]:attempt 1 rank 1") != std::string::npos);
  CHECK(run.Stderr().find("FAILED\n") == std::string::npos);
}

TEST_CASE(
    "ddprun: --standby_workers with a program that ignores the "
    "standby protocol: no rank, 3 restarts, then none",
    "[agent][process]") {
  TempDir dir;
  Ddprun run(
      dir, {"--standalone", "--nproc_per_node=2", "--restart_scope", "failed",
            "--standby_workers", "--no_python", kData + "/standby_unaware.sh"});
  REQUIRE(run.Wait(30s) == 0);
  const std::string out = run.Stdout();
  CHECK(out.find("[default0]:rank 0 done") != std::string::npos);
  CHECK(out.find("[default1]:rank 1 done") != std::string::npos);
  // Each standby ran without a rank or the store's port; the first and
  // three more, then the node went on without one.
  const std::string standbys = ReadFile(dir.path() + "/standby.txt");
  size_t n = 0;
  for (size_t at = 0; (at = standbys.find("RANK=unset MASTER_PORT=unset\n",
                                          at)) != std::string::npos;
       ++at) {
    ++n;
  }
  CHECK(n == 4);
  CHECK(standbys.find("RANK=0") == std::string::npos);
  CHECK(run.Stderr().find("exited on its own (exit code 3) 4 times: this "
                          "node runs without one") != std::string::npos);
}

TEST_CASE("ddprun: the same failure fails the job with max_restarts=0",
          "[agent][process]") {
  TempDir dir;
  Ddprun run(dir, {"--nproc_per_node=2", "--max_restarts=0", "--no_python",
                   kData + "/fail_once.sh"});
  REQUIRE(run.Wait() == 1);
  std::string err = run.Stderr();
  CHECK(err.find(kData + "/fail_once.sh FAILED") != std::string::npos);
  CHECK(err.find("Root Cause (first observed failure):") != std::string::npos);
  CHECK(err.find("  rank      : 1 (local_rank: 1)") != std::string::npos);
  CHECK(err.find("  exitcode  : 3 (pid: ") != std::string::npos);
  CHECK(err.find("  error_file: <N/A>") != std::string::npos);
  CHECK(run.Stdout().find("attempt 1") == std::string::npos);
}

TEST_CASE("ddprun: error.json root cause is shown and copied",
          "[agent][process]") {
  TempDir dir;
  std::string agent_error = dir.path() + "/agent_error.json";
  Ddprun run(dir,
             {"--nproc_per_node=3", "--no_python", kData + "/error_file.sh"},
             {{"TORCHELASTIC_ERROR_FILE", agent_error}});
  REQUIRE(run.Wait() == 1);
  std::string err = run.Stderr();
  CHECK(err.find("  rank      : 1 (local_rank: 1)") != std::string::npos);
  CHECK(err.find("  exitcode  : 5 (pid: ") != std::string::npos);
  CHECK(err.find("/attempt_0/1/error.json") != std::string::npos);
  CHECK(err.find("  traceback : Traceback (most recent call last):\n"
                 "    File \"train.py\", line 3\n"
                 "  ValueError: bad batch") != std::string::npos);
  CHECK(err.find("  time      : 2023-11-1") != std::string::npos);
  std::string copied = ReadFile(agent_error);
  CHECK(copied.find("\"errorCode\":5") != std::string::npos);
  CHECK(copied.find("ValueError: bad batch") != std::string::npos);
}

TEST_CASE("ddprun: SIGTERM stops every worker, exit 143", "[agent][process]") {
  TempDir dir;
  Ddprun run(dir, {"--nproc_per_node=4", "--no_python", kData + "/sleeper.sh"});
  REQUIRE(WaitForFiles(PidFiles(dir, 4)));
  std::vector<int> pids = ReadPids(dir, 4);
  for (int p : pids) {
    CHECK_FALSE(IsDead(p));
    // Each worker leads its own session and process group.
    CHECK(StatField(p, 5) == p);  // pgrp
    CHECK(StatField(p, 6) == p);  // session
  }
  std::string status =
      ReadFile("/proc/" + std::to_string(run.pid()) + "/status");
  size_t hwm = status.find("VmHWM:");
  REQUIRE(hwm != std::string::npos);
  long hwm_kb = std::atol(status.c_str() + hwm + 6);
  INFO("ddprun VmHWM with 4 workers: " << hwm_kb << " kB");
  CHECK(hwm_kb < 20 * 1024);
  auto start = Clock::now();
  kill(run.pid(), SIGTERM);
  REQUIRE(run.Wait(10s) == 128 + SIGTERM);
  CHECK(Clock::now() - start < 5s);
  CHECK(WaitDead(pids));
}

TEST_CASE("ddprun: kill -9 of ddprun leaves no worker alive",
          "[agent][process]") {
  TempDir dir;
  Ddprun run(dir, {"--nproc_per_node=4", "--no_python", kData + "/sleeper.sh"});
  REQUIRE(WaitForFiles(PidFiles(dir, 4)));
  std::vector<int> pids = ReadPids(dir, 4);
  kill(run.pid(), SIGKILL);
  REQUIRE(run.Wait(5s) == 128 + SIGKILL);
  CHECK(WaitDead(pids));
}

TEST_CASE("ddprun: SIGKILL after --shutdown_timeout for stubborn workers",
          "[agent][process]") {
  TempDir dir;
  // The worker ignores SIGTERM; ddprun must SIGKILL its group after 0.5 s.
  Ddprun run(dir, {"--nproc_per_node=1", "--shutdown_timeout=0.5",
                   "--no_python", "sh", "-c",
                   "trap '' TERM; echo $$ > $DDPRUN_TEST_OUT/pid_0; "
                   "while :; do sleep 0.05; done"});
  REQUIRE(WaitForFiles(PidFiles(dir, 1)));
  auto start = Clock::now();
  kill(run.pid(), SIGTERM);
  REQUIRE(run.Wait(20s) == 128 + SIGTERM);
  auto took = Clock::now() - start;
  CHECK(took >= 400ms);
  CHECK(std::chrono::duration<double>(took).count() <
        ddprun::test_timing::ReactionBoundS(0.5));
  CHECK(WaitDead(ReadPids(dir, 1)));
}

TEST_CASE("ddprun: --log_dir layout with tee prefixes and redirects",
          "[agent][process]") {
  TempDir dir;
  std::string logs = dir.path() + "/logs";
  Ddprun run(
      dir, {"--nproc_per_node=2", "--log_dir", logs, "--tee=1", "--redirects=2",
            "--rdzv_id=myjob", "--no_python", kData + "/env_dump.sh"});
  REQUIRE(run.Wait() == 0);
  // <log_dir>/<run_id>_<rand>/attempt_0/<local_rank>/
  const std::string listing = ShellStdout("ls -d " + logs + "/myjob_*");
  REQUIRE_FALSE(listing.empty());
  std::string run_dir = listing.substr(0, listing.find('\n'));
  for (int r = 0; r < 2; ++r) {
    std::string d = run_dir + "/attempt_0/" + std::to_string(r);
    CHECK(ReadFile(d + "/stdout.log") ==
          "hello from " + std::to_string(r) + "\n");
    CHECK(ReadFile(d + "/stderr.log") ==
          "warning from " + std::to_string(r) + "\n");
  }
  // stdout is teed (console + file, prefixed); stderr only redirected.
  CHECK(run.Stdout().find("[default0]:hello from 0\n") != std::string::npos);
  CHECK(run.Stdout().find("[default1]:hello from 1\n") != std::string::npos);
  CHECK(run.Stderr().find("warning from") == std::string::npos);
}

TEST_CASE("ddprun: --local_ranks_filter limits the console only",
          "[agent][process]") {
  TempDir dir;
  std::string logs = dir.path() + "/logs";
  Ddprun run(dir, {"--nproc_per_node=3", "--local_ranks_filter=2", "--log_dir",
                   logs, "-t", "3", "--no_python", kData + "/env_dump.sh"});
  REQUIRE(run.Wait() == 0);
  CHECK(run.Stdout() == "[default2]:hello from 2\n");
  CHECK(ShellStdout("cat " + logs + "/*/attempt_0/0/stdout.log") ==
        "hello from 0\n");
}

TEST_CASE("ddprun: lines of many workers never interleave mid-line",
          "[agent][process]") {
  TempDir dir;
  // Each worker writes 200 long lines in small pieces.
  std::string script =
      "i=0; while [ $i -lt 200 ]; do printf 'rank%s-' $RANK; "
      "printf 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'; "
      "printf 'end\\n'; i=$((i+1)); done";
  Ddprun run(dir, {"--nproc_per_node=4", "--no_python", "sh", "-c", script});
  REQUIRE(run.Wait() == 0);
  std::stringstream ss(run.Stdout());
  int lines = 0;
  for (std::string line; std::getline(ss, line); ++lines) {
    std::string lr = line.substr(8, 1);  // "[default<lr>]:rank<lr>-...end"
    CHECK(line ==
          "[default" + lr + "]:rank" + lr + "-" + std::string(49, 'x') + "end");
  }
  CHECK(lines == 800);
}

TEST_CASE("ddprun-launch: legacy mode appends --local_rank",
          "[agent][process]") {
  TempDir dir;
  Ddprun run(dir,
             {"--nproc_per_node=2", "--no_python", "--use_env",
              kData + "/env_dump.sh", "x"},
             {}, DDPRUN_BIN_DIR "/ddprun-launch");
  REQUIRE(run.Wait() == 0);
  CHECK(ReadFile(dir.path() + "/args_1") == "args:x\n");
  TempDir dir2;
  Ddprun legacy(dir2,
                {"--nproc_per_node=2", "--torch_version=1.13",
                 kData + "/env_dump.sh", "x"},
                {{"PYTHON_EXEC", "/bin/sh"}}, DDPRUN_BIN_DIR "/ddprun-launch");
  REQUIRE(legacy.Wait() == 0);
  // /bin/sh -u script --local_rank=N x, as torch 1.x's launcher
  CHECK(ReadFile(dir2.path() + "/args_1") == "args:--local_rank=1 x\n");
  // /bin/sh is no Python: the torch version is unknown, so torch 2.x's
  // launcher is the model: --local-rank.
  TempDir dir3;
  Ddprun dashed(dir3, {"--nproc_per_node=2", kData + "/env_dump.sh", "x"},
                {{"PYTHON_EXEC", "/bin/sh"}}, DDPRUN_BIN_DIR "/ddprun-launch");
  REQUIRE(dashed.Wait() == 0);
  CHECK(ReadFile(dir3.path() + "/args_1") == "args:--local-rank=1 x\n");
}

TEST_CASE("ddprun: a bad flag is one line and exit 2", "[agent][process]") {
  TempDir dir;
  Ddprun run(dir, {"--no_such_flag", "--no_python", "true"});
  REQUIRE(run.Wait() == 2);
  std::string err = run.Stderr();
  CHECK(err.find("no_such_flag") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

TEST_CASE("ddprun: a static node whose peers never come fails at join_timeout",
          "[agent][process]") {
  TempDir dir;
  const int port = FreeLoopbackPort();
  auto start = Clock::now();
  // Node 1 of 2, and nobody hosts the rendezvous at the master port.
  Ddprun run(dir, {"--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1",
                   "--master_port=" + std::to_string(port),
                   "--rdzv_conf=join_timeout=1", "--no_python", "true"});
  REQUIRE(run.Wait(10s) == 1);
  CHECK(Clock::now() - start < 5s);
  CHECK(run.Stderr().find("did not complete before the deadline") !=
        std::string::npos);
}

TEST_CASE("ddprun: SIGTERM while waiting in the rendezvous exits 143 at once",
          "[agent][process]") {
  TempDir dir;
  const int port = FreeLoopbackPort();
  // Hosts the rendezvous and waits for a second node that never comes.
  Ddprun run(dir, {"--nnodes=2", "--rdzv_backend=grpc",
                   "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                   "--no_python", "true"});
  REQUIRE(run.WaitForOutput("created", 10s));
  REQUIRE(run.Stderr().find("created") != std::string::npos);
  auto start = Clock::now();
  kill(run.pid(), SIGTERM);
  REQUIRE(run.Wait(10s) == 143);
  CHECK(Clock::now() - start < 3s);
  CHECK(run.Stderr().find("received SIGTERM while waiting for the "
                          "rendezvous") != std::string::npos);
}

TEST_CASE("ddprun: a grandchild holding stdout does not delay the exit",
          "[agent][process]") {
  TempDir dir;
  // The background sleep inherits the worker's stdout pipe; ddprun must not
  // wait for its EOF once the worker itself has exited.
  Ddprun run(dir, {"--nproc_per_node=1", "--no_python", "sh", "-c",
                   "sleep 3 & echo $! > $DDPRUN_TEST_OUT/pid_0; echo done"});
  auto start = Clock::now();
  REQUIRE(run.Wait(10s) == 0);
  CHECK(Clock::now() - start < 2s);
  CHECK(run.Stdout() == "[default0]:done\n");
  if (Exists(dir.path() + "/pid_0"))
    kill(std::atoi(ReadFile(dir.path() + "/pid_0").c_str()), SIGKILL);
}

TEST_CASE("ddprun: --signals_to_handle forwards SIGUSR1 to the workers",
          "[agent][process]") {
  TempDir dir;
  std::string worker =
      "trap 'echo got > $DDPRUN_TEST_OUT/usr1_$RANK; exit 0' USR1; "
      "echo $$ > $DDPRUN_TEST_OUT/pid_$RANK; "
      "while :; do sleep 0.05; done";
  Ddprun run(dir, {"--nproc_per_node=2", "--signals_to_handle=SIGUSR1,SIGTERM",
                   "--no_python", "sh", "-c", worker});
  REQUIRE(WaitForFiles(PidFiles(dir, 2)));
  kill(run.pid(), SIGUSR1);
  REQUIRE(run.Wait(10s) == 128 + SIGUSR1);
  CHECK(ReadFile(dir.path() + "/usr1_0") == "got\n");
  CHECK(ReadFile(dir.path() + "/usr1_1") == "got\n");
  CHECK(WaitDead(ReadPids(dir, 2)));
}

TEST_CASE("ddprun: --watchdog_timeout restarts a SIGSTOPped worker",
          "[agent][process][watchdog]") {
  TempDir dir;
  // sleeper.sh execs `sleep 60`: a stopped worker would hold the job for a
  // minute without the watchdog.
  Ddprun run(dir,
             {"--nproc_per_node=1", "--max_restarts=1", "--watchdog_timeout=1",
              "--no_python", kData + "/sleeper.sh"});
  REQUIRE(WaitForFiles(PidFiles(dir, 1)));
  const int first = ReadPids(dir, 1)[0];
  REQUIRE(first > 0);
  ::unlink((dir.path() + "/pid_0").c_str());
  const auto stopped_at = Clock::now();
  kill(first, SIGSTOP);
  REQUIRE(WaitForFiles(PidFiles(dir, 1), 5s));
  const auto restarted = Clock::now() - stopped_at;
  std::printf(
      "[agent] watchdog: stopped worker replaced after %.2f s "
      "(--watchdog_timeout=1)\n",
      std::chrono::duration<double>(restarted).count());
  CHECK(restarted >= 1s);
  CHECK(restarted <= 2s);  // timeout + 1 s
  CHECK(WaitDead({first}));
  // Stopped again with the budget spent: the job fails, naming the watchdog.
  const int second = ReadPids(dir, 1)[0];
  REQUIRE(second != first);
  kill(second, SIGSTOP);
  REQUIRE(run.Wait(10s) == 1);
  const std::string err = run.Stderr();
  INFO(err);
  CHECK(err.find("watchdog: local_rank 0 (pid " + std::to_string(second) +
                 ") hung, stopped (state T) for 1.") != std::string::npos);
  CHECK(err.find("exitcode  : -9 (pid: " + std::to_string(second) + ")") !=
        std::string::npos);
  CHECK(err.find("traceback : killed by the ddprun watchdog: stopped (state "
                 "T) for 1.") != std::string::npos);
  CHECK(WaitDead({second}));
}

TEST_CASE("ddprun: a stopped worker is continued so SIGTERM stops it at once",
          "[agent][process]") {
  TempDir dir;
  // Rank 0 fails once `go` exists; rank 1 sleeps and will be stopped. A
  // stopped process only acts on SIGTERM once continued: without SIGCONT the
  // agent would wait --shutdown_timeout (30 s) before its SIGKILL.
  Ddprun run(
      dir,
      {"--nproc_per_node=2", "--shutdown_timeout=30", "--no_python", "sh", "-c",
       "echo $$ > $DDPRUN_TEST_OUT/pid_$RANK.tmp && "
       "mv $DDPRUN_TEST_OUT/pid_$RANK.tmp $DDPRUN_TEST_OUT/pid_$RANK; "
       "if [ $RANK = 0 ]; then "
       "while [ ! -e $DDPRUN_TEST_OUT/go ]; do sleep 0.05; done; "
       "exit 1; fi; exec sleep 60"});
  REQUIRE(WaitForFiles(PidFiles(dir, 2)));
  std::vector<int> pids = ReadPids(dir, 2);
  kill(pids[1], SIGSTOP);
  const auto start = Clock::now();
  std::ofstream(dir.path() + "/go").put('1');
  REQUIRE(run.Wait(20s) == 1);
  CHECK(Clock::now() - start < 5s);
  CHECK(WaitDead(pids));
}

namespace {

// stdout of `sh -c cmd`.
std::string Shell(const std::string& cmd) { return ShellStdout(cmd); }

long Lines(const std::string& text) {
  return std::count(text.begin(), text.end(), '\n');
}

// Runs ddprun to its end: exit code, and stderr that must be one line.
int RunBad(const std::vector<std::string>& args, std::string* err,
           std::map<std::string, std::string> env = {}) {
  TempDir dir;
  Ddprun run(dir, args, std::move(env));
  const int code = run.Wait();
  *err = run.Stderr();
  INFO(*err);
  CHECK(Lines(*err) == 1);
  CHECK(run.Stdout().empty());
  return code;
}

}  // namespace

TEST_CASE("ddprun: warnings wait until the whole command line parsed",
          "[agent][process]") {
  std::string err;
  // --standalone ignoring --rdzv_id and --event_log_handler are warnings,
  // but the bad --nproc_per_node after them makes it one error line only.
  CHECK(RunBad({"--standalone", "--rdzv_id=job7", "--event_log_handler=console",
                "--nproc_per_node=0", "--no_python", "true"},
               &err) == 2);
  CHECK(err.find("--nproc_per_node") != std::string::npos);
  CHECK(err.find("ignores") == std::string::npos);
  // Without the error the warnings are printed.
  TempDir dir;
  Ddprun ok(dir, {"--standalone", "--rdzv_id=job7",
                  "--event_log_handler=console", "--no_python", "true"});
  REQUIRE(ok.Wait() == 0);
  CHECK(ok.Stderr().find("--standalone ignores --rdzv_id=job7") !=
        std::string::npos);
  CHECK(ok.Stderr().find("--event_log_handler=console is accepted") !=
        std::string::npos);
}

TEST_CASE("ddprun: a rendezvous that cannot be hosted exits 1, not 2",
          "[agent][process]") {
  // Something else listens on the port node 0 must host the rendezvous on.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  std::string err;
  CHECK(RunBad({"--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
                "--master_port=" + port, "--no_python", "true"},
               &err) == 1);
  CHECK(err.find("127.0.0.1:" + port) != std::string::npos);
  std::string lower = err;
  for (char& c : lower) c = static_cast<char>(std::tolower(c));
  CHECK(lower.find("address already in use") != std::string::npos);
  close(fd);
  // Rendezvous flags that contradict each other stay bad input.
  CHECK(RunBad({"--nnodes=2", "--rdzv_backend=grpc", "--no_python", "true"},
               &err) == 2);
  CHECK(err.find("needs --rdzv_endpoint") != std::string::npos);
}

TEST_CASE("ddprun: --rdzv_conf typos and bad values are exit 2",
          "[agent][process]") {
  std::string err;
  CHECK(RunBad({"--standalone", "--rdzv_conf=join_timout=5", "--no_python",
                "true"},
               &err) == 2);
  CHECK(err.find("unknown key 'join_timout'") != std::string::npos);
  CHECK(err.find("known keys: join_timeout,") != std::string::npos);
  CHECK(RunBad({"--rdzv_conf=join_timeout=abc", "--no_python", "true"}, &err) ==
        2);
  CHECK(err.find("join_timeout=abc") != std::string::npos);
}

TEST_CASE("ddprun: command lines from torch launcher tests",
          "[agent][process]") {
  std::string err;
  // test_launch_elastic passes the shell's quotes inside the argument.
  {
    TempDir dir;
    Ddprun run(dir,
               {"--standalone", "--nproc_per_node=2",
                "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
                "--no_python", kData + "/env_dump.sh"});
    REQUIRE(run.Wait(30s) == 0);
    INFO(run.Stderr());
    CHECK(ReadFile(dir.path() + "/args_1") == "args:\n");
  }
  CHECK(RunBad({"--standalone", "--rdzv_conf='join_timout=5'", "--no_python",
                "true"},
               &err) == 2);
  CHECK(err.find("unknown key 'join_timout'") != std::string::npos);
  // torchrun's _get_logs_specs_class: only the registered name `default`.
  CHECK(RunBad({"--logs_specs=my_specs", "--no_python", "true"}, &err) == 2);
  CHECK(err.find("--logs_specs: unknown logs spec 'my_specs'") !=
        std::string::npos);
  {
    TempDir dir;
    Ddprun run(dir, {"--logs-specs=default", "--no_python", "true"});
    REQUIRE(run.Wait() == 0);
    CHECK(run.Stderr().find("logs_specs") == std::string::npos);
  }
  // torch.distributed.launch: --no-python needs --use-env (the program
  // would get --local-rank=N as its first argument).
  {
    TempDir dir;
    Ddprun run(
        dir, {"--nproc_per_node=2", "--no-python", kData + "/env_dump.sh", "x"},
        {}, DDPRUN_BIN_DIR "/ddprun-launch");
    REQUIRE(run.Wait() == 2);
    CHECK(run.Stderr() ==
          "ddprun-launch: error: When using the '--no-python' flag, you must "
          "also set the '--use-env' flag.\n");
    CHECK(ReadFile(dir.path() + "/args_0").empty());  // nothing started
  }
}

TEST_CASE("ddprun: --log_dir /dev/null writes no files (torchrun >= 2.3)",
          "[agent][process]") {
  TempDir dir;
  const std::string tmp = dir.path() + "/tmp";
  REQUIRE(mkdir(tmp.c_str(), 0755) == 0);
  // -r/-t have no file to write to: every stream reaches the console.
  Ddprun run(dir,
             {"--nproc_per_node=2", "--log_dir", "/dev/null", "-r", "3", "-t",
              "1", "--no_python", kData + "/env_dump.sh"},
             {{"TMPDIR", tmp}});
  REQUIRE(run.Wait() == 0);
  for (int r = 0; r < 2; ++r) {
    auto env = ParseEnv(ReadFile(dir.path() + "/env_" + std::to_string(r)));
    REQUIRE(env.count("TORCHELASTIC_ERROR_FILE"));
    CHECK(env["TORCHELASTIC_ERROR_FILE"].empty());
    const std::string lr = std::to_string(r);
    CHECK(run.Stdout().find("[default" + lr + "]:hello from " + lr + "\n") !=
          std::string::npos);
    CHECK(run.Stderr().find("[default" + lr + "]:warning from " + lr + "\n") !=
          std::string::npos);
  }
  CHECK(Shell("ls -A " + tmp).empty());
  // A failure is still reported, without an error file.
  Ddprun fail(dir, {"--log_dir=/dev/null", "--no_python", "sh", "-c", "exit 3"},
              {{"TMPDIR", tmp}});
  REQUIRE(fail.Wait() == 1);
  CHECK(fail.Stderr().find("  exitcode  : 3 (pid: ") != std::string::npos);
  CHECK(fail.Stderr().find("  error_file: <N/A>") != std::string::npos);
  CHECK(Shell("ls -A " + tmp).empty());
}

TEST_CASE("ddprun: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE shapes the prefix",
          "[agent][process]") {
  TempDir dir;
  Ddprun run(dir,
             {"--nproc_per_node=2", "--role=trainer", "--no_python",
              kData + "/env_dump.sh"},
             {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
               "<${role_name}:$rank/${local_rank}> "}});
  REQUIRE(run.Wait() == 0);
  CHECK(run.Stdout().find("<trainer:0/0> hello from 0\n") != std::string::npos);
  CHECK(run.Stdout().find("<trainer:1/1> hello from 1\n") != std::string::npos);
  CHECK(run.Stderr().find("<trainer:1/1> warning from 1\n") !=
        std::string::npos);
  CHECK(run.Stdout().find("[trainer") == std::string::npos);
  std::string err;
  CHECK(RunBad({"--no_python", "true"}, &err,
               {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${group}]:"}}) ==
        2);
  CHECK(err.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") != std::string::npos);
  CHECK(err.find("unknown placeholder 'group'") != std::string::npos);
}

TEST_CASE("ddprun: per-rank -r/-t maps decide console and files per rank",
          "[agent][process]") {
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  // Rank 0 tees both streams, rank 1 tees stdout only (its stderr is not
  // redirected: console only), rank 2 redirects both (files only).
  Ddprun run(dir, {"--nproc_per_node=3", "--log_dir", logs, "-r", "2:3", "-t",
                   "0:3,1:1", "--no_python", kData + "/env_dump.sh"});
  REQUIRE(run.Wait() == 0);
  const std::string out = run.Stdout(), err = run.Stderr();
  CHECK(out.find("[default0]:hello from 0\n") != std::string::npos);
  CHECK(err.find("[default0]:warning from 0\n") != std::string::npos);
  CHECK(out.find("[default1]:hello from 1\n") != std::string::npos);
  CHECK(err.find("[default1]:warning from 1\n") != std::string::npos);
  CHECK(out.find("from 2") == std::string::npos);
  CHECK(err.find("from 2") == std::string::npos);
  const std::string run_dir = Shell("ls -d " + logs + "/*/ | head -1");
  REQUIRE_FALSE(run_dir.empty());
  const std::string a0 = run_dir.substr(0, run_dir.size() - 1) + "attempt_0/";
  CHECK(ReadFile(a0 + "0/stdout.log") == "hello from 0\n");
  CHECK(ReadFile(a0 + "0/stderr.log") == "warning from 0\n");
  CHECK(ReadFile(a0 + "1/stdout.log") == "hello from 1\n");
  CHECK_FALSE(Exists(a0 + "1/stderr.log"));
  CHECK(ReadFile(a0 + "2/stdout.log") == "hello from 2\n");
  CHECK(ReadFile(a0 + "2/stderr.log") == "warning from 2\n");
}

TEST_CASE("ddprun: --help exits 0 and lists every flag", "[agent][process]") {
  TempDir dir;
  Ddprun run(dir, {"--help"});
  REQUIRE(run.Wait() == 0);
  const std::string help = run.Stdout();
  CHECK(run.Stderr().empty());
  for (const char* flag : {"--nnodes",
                           "--nproc_per_node",
                           "--standalone",
                           "--max_restarts",
                           "--rdzv_backend",
                           "--rdzv_endpoint",
                           "--rdzv_id",
                           "--rdzv_conf",
                           "--log_dir",
                           "--redirects",
                           "--tee",
                           "--local_ranks_filter",
                           "--no_python",
                           "--module",
                           "--run_path",
                           "--signals_to_handle",
                           "--shutdown_timeout",
                           "--monitor_interval",
                           "--role",
                           "--node_rank",
                           "--master_addr",
                           "--master_port",
                           "--local_addr",
                           "--exit_barrier_timeout",
                           "--virtual_local_rank"}) {
    INFO(flag);
    CHECK((help.find(std::string(flag) + " ") != std::string::npos ||
           help.find(std::string(flag) + "\n") != std::string::npos));
  }
  CHECK(help.find("usage: ddprun") == 0);
}

namespace {

// ddprun with `args` in a new pseudo-terminal of `rows` x `cols`, read
// until every writer of it is gone (EIO) or `limit`; `on_data(seen)` after
// each read. Returns what the terminal got; *exit_code = ddprun's.
std::string RunInTerminal(
    const std::vector<std::string>& args, unsigned short rows,
    unsigned short cols, std::chrono::seconds limit, int* exit_code,
    const std::function<void(const std::string&)>& on_data = nullptr) {
  winsize size{};
  size.ws_row = rows;
  size.ws_col = cols;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &size);
  if (pid < 0) return "forkpty failed";
  if (pid == 0) {
    std::vector<char*> argv = {const_cast<char*>(kBin.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(kBin.c_str(), argv.data());
    _exit(127);
  }
  std::string seen;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < limit) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[65536];
    const ssize_t n = read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO: every writer of the terminal is gone
    seen.append(buf, static_cast<std::size_t>(n));
    if (on_data) on_data(seen);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return seen;
}

}  // namespace

TEST_CASE("ddprun: in a terminal workers get one and CR redraws show live",
          "[agent][process]") {
  TempDir dir;
  // A progress bar as tqdm draws it: '\r' first, no newline until the end.
  const std::string bar = dir.path() + "/bar.sh";
  std::ofstream(bar) << "#!/bin/sh\n"
                        "[ -t 1 ] && echo stdout-is-a-tty\n"
                        "[ -t 2 ] && echo stderr-is-a-tty >&2\n"
                        "echo \"size $(stty size <&2 2>/dev/null)\"\n"
                        "printf '\\r step 1' >&2; sleep 1\n"
                        "printf '\\r step 2' >&2; sleep 1\n"
                        "printf '\\r step 3\\n' >&2\n";
  REQUIRE(chmod(bar.c_str(), 0755) == 0);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Clock::duration step1_at{}, step3_at{};
  int code = -1;
  const std::string seen =
      RunInTerminal({"--nproc_per_node=1", "--no_python", bar}, 33, 97, 20s,
                    &code, [&](const std::string& s) {
                      if (step1_at == Clock::duration{} &&
                          s.find("step 1") != std::string::npos) {
                        step1_at = Clock::now() - start;
                      }
                      if (step3_at == Clock::duration{} &&
                          s.find("step 3") != std::string::npos) {
                        step3_at = Clock::now() - start;
                      }
                    });
  INFO(seen);
  CHECK(code == 0);
  // Each redraw behind the prefix, and the first one ~2 s before the last.
  CHECK(seen.find("\r[default0]: step 1\r[default0]: step 2\r[default0]: "
                  "step 3") != std::string::npos);
  CHECK(step3_at - step1_at >= 1500ms);
  // The worker's own stdout and stderr are terminals of the same size.
  CHECK(seen.find("[default0]:stdout-is-a-tty") != std::string::npos);
  CHECK(seen.find("[default0]:stderr-is-a-tty") != std::string::npos);
  CHECK(seen.find("[default0]:size 33 97") != std::string::npos);

  // Not a terminal: nothing changes, the line shows once it ends.
  TempDir files;
  Ddprun piped(files, {"--nproc_per_node=1", "--no_python", bar});
  REQUIRE(piped.Wait(20s) == 0);
  CHECK(piped.Stderr().find("[default0]:\r step 1\r step 2\r step 3\n") !=
        std::string::npos);
  // ... and the worker's streams are pipes.
  CHECK(piped.Stdout().find("tty") == std::string::npos);
  CHECK(piped.Stderr().find("tty") == std::string::npos);
  CHECK(piped.Stdout().find("[default0]:size \n") != std::string::npos);
}

TEST_CASE("ddprun: in a terminal busy ranks never cut a line",
          "[agent][process]") {
  TempDir dir;
  const std::string seq = dir.path() + "/seq.sh";
  std::ofstream(seq) << "#!/bin/sh\nseq 1 3000\n";
  REQUIRE(chmod(seq.c_str(), 0755) == 0);
  int code = -1;
  const std::string all = RunInTerminal(
      {"--nproc_per_node=3", "--no_python", seq}, 24, 80, 30s, &code);
  CHECK(code == 0);
  std::map<std::string, int> per_rank;
  int cut = 0;  // lines not exactly the next number of their rank
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // ONLCR
    if (line.compare(0, 8, "[default") != 0) continue;
    const auto colon = line.find("]:");
    REQUIRE(colon != std::string::npos);
    const std::string rank = line.substr(8, colon - 8);
    if (line.substr(colon + 2) != std::to_string(++per_rank[rank])) ++cut;
  }
  CHECK(cut == 0);
  CHECK(per_rank ==
        std::map<std::string, int>{{"0", 3000}, {"1", 3000}, {"2", 3000}});
}
