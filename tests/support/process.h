#pragma once

// The one process harness of the C++ process tests (target
// ddprun_test_support): free loopback ports, child processes started with
// argv / environment / working directory whose stdout and stderr land in
// files, waits that always have a deadline, signals to a child or its
// process group, and waits on a condition (a file, a line of output, a
// process state). Test code only. The specialised helpers of the suites
// (tests/agent/process_harness.h, tests/multinode/multinode_util.h,
// tests/worker/rank_process.h, tests/examples/trainer_run.h, ...) are thin
// layers over this one.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddprun::testing {

using SteadyClock = std::chrono::steady_clock;

// A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read the
// port back); 0 when no socket could be bound.
int FreeLoopbackPort();

// Polls `done` every `poll` until it holds (true) or `timeout` passes
// (false). `done` is called at least once.
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds timeout,
               std::chrono::milliseconds poll = std::chrono::milliseconds(10));

// The whole file ("" when it cannot be read).
std::string ReadFile(const std::string& path);
// Names in `dir` without "." and ".." (empty when it cannot be read).
std::vector<std::string> ListDir(const std::string& dir);
bool FileExists(const std::string& path);
// Waits until every path exists.
bool WaitForFiles(const std::vector<std::string>& paths,
                  std::chrono::milliseconds timeout);
// Waits until the file at `path` contains `part`.
bool WaitForText(const std::string& path, const std::string& part,
                 std::chrono::milliseconds timeout);

// Waits until a TCP connect to 127.0.0.1:`port` succeeds (something
// listens there); the probe connection is closed at once.
bool WaitForPort(int port, std::chrono::milliseconds timeout);

// True when `pid` is gone or a zombie (dead, not yet reaped).
bool IsDead(pid_t pid);
// Waits until every pid IsDead.
bool WaitDead(const std::vector<pid_t>& pids,
              std::chrono::milliseconds timeout);

// A fresh /tmp/<prefix>XXXXXX directory, removed (rm -rf) at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ddprun_test_");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// How to start a child process.
struct ProcessOptions {
  // argv[0] is the executable: a path, or a name looked up in PATH.
  std::vector<std::string> argv;
  // Added to (a key "-NAME" removes NAME from) the test's environment.
  std::map<std::string, std::string> env;
  // Working directory; "" keeps the test's.
  std::string cwd;
  // stdout goes to <output_dir>/<name>.out, stderr to <name>.err (or into
  // .out too when merge_stderr); "" = a private directory removed with the
  // Process.
  std::string output_dir;
  std::string name = "process";
  bool merge_stderr = false;
  // The child leads a process group of its own (setpgid), so that
  // SignalGroup and the destructor reach everything it started; false keeps
  // it in the test's group (a launcher whose own group handling is tested).
  bool own_process_group = true;
};

// A running child process. The destructor kills (SIGKILL; its process group
// too when it leads one) and reaps a child still running.
class Process {
 public:
  explicit Process(ProcessOptions options);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Exit code (128+N when killed by signal N); -1 when `timeout` passes
  // first (the child keeps running).
  int Wait(std::chrono::milliseconds timeout);
  bool Running() { return Wait(std::chrono::milliseconds(0)) == -1; }
  // The exit code once Wait saw the exit, else -1.
  int exit_code() const { return exit_code_; }
  // Whether the exit Wait saw was by a signal (exit_code 128+N).
  bool killed_by_signal() const { return signaled_; }
  // Sends `sig` to the child alone.
  void Signal(int sig);
  // Sends `sig` to the child's process group (the child alone when it does
  // not lead one).
  void SignalGroup(int sig);
  // SIGTERM to the group, `grace` to exit, then SIGKILL; the exit code.
  int Stop(std::chrono::milliseconds grace);
  pid_t pid() const { return pid_; }

  std::string Stdout() const;
  std::string Stderr() const;  // "" when merged into Stdout
  // Both streams, labelled, for failure messages.
  std::string Output() const;
  const std::string& stdout_path() const { return out_; }
  const std::string& stderr_path() const { return err_; }
  // Waits until stdout or stderr contains `part` (false also when the child
  // exited without printing it).
  bool WaitForOutput(const std::string& part,
                     std::chrono::milliseconds timeout);

 private:
  ProcessOptions options_;
  std::string private_dir_;  // removed by the destructor
  std::string out_, err_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  bool signaled_ = false;
};

// Exit code and output of a finished command.
struct CommandResult {
  int exit_code = -1;  // 124 when the deadline stopped it
  std::string output;  // stdout, with stderr interleaved when merged
  std::string error;   // stderr when not merged
};

// Runs `options` to completion; at `timeout` its process group gets SIGTERM,
// 5 s later SIGKILL, and exit_code is 124 (as coreutils' timeout).
CommandResult RunProcess(ProcessOptions options,
                         std::chrono::milliseconds timeout);

// `/bin/sh -c command` with `env` added, under RunProcess's deadline;
// stderr is merged into the output (a command can still redirect it) or,
// with merge_stderr false, kept apart in `error`.
CommandResult RunShell(const std::string& command,
                       std::chrono::milliseconds timeout,
                       const std::map<std::string, std::string>& env = {},
                       bool merge_stderr = true);

}  // namespace ddprun::testing
