#pragma once

// Helpers for the multi-node tests: real ddprun / ddprun-rendezvous
// processes on loopback (or in network namespaces), output to files, every
// wait bounded.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace ddprun::multinode {

using testing::SteadyClock;
using namespace std::chrono_literals;

inline const std::string kBinDir = DDPRUN_BIN_DIR;
inline const std::string kData = DDPRUN_SOURCE_DIR "/tests/multinode/data";

using testing::FreeLoopbackPort;
using testing::ListDir;
using testing::ReadFile;
using testing::WaitUntil;

// A fresh /tmp directory, removed (rm -rf) at scope exit, after killing
// the workers recorded in it (KillRecordedWorkers).
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("ddprun_multinode_") {}
  ~TempDir();
};

// A child process (argv[0] is the executable path) with stdout and stderr in
// `<dir>/<name>.out|.err`, leading its own process group. Killed (SIGKILL,
// its process group too) and reaped by the destructor if still running.
class Child : public testing::Process {
 public:
  Child(const std::string& dir, const std::string& name,
        std::vector<std::string> argv,
        std::map<std::string, std::string> env = {});
  // `sig` to the child alone (a kill -9'd agent leaves its workers).
  void Kill(int sig) { Signal(sig); }
};

// `ddprun-rendezvous --host 127.0.0.1 --port <port>` (0: any free port); the
// bound port is read back from its "listening on" log line.
class RendezvousServerProcess {
 public:
  RendezvousServerProcess(const std::string& dir, int port,
                          const std::vector<std::string>& prefix = {},
                          const std::string& host = "127.0.0.1");
  int port() const { return port_; }  // 0 if it never listened
  Child& child() { return *child_; }

 private:
  std::unique_ptr<Child> child_;
  int port_ = 0;
};

// One line per worker start written by data/env_worker.sh (see there).
struct WorkerStart {
  std::string node;  // MN_NODE of its agent
  int rank = -1, world_size = 0, group_rank = -1, group_world_size = 0;
  int restart_count = -1;
  int pid = 0;
  double wall_time = 0;     // seconds since the epoch
  std::string master_addr;  // MASTER_ADDR the worker saw
};
std::vector<WorkerStart> ReadWorkerStarts(const std::string& dir);

// Kills (SIGKILL) every worker pid recorded in `dir` (left by a kill -9'd
// agent).
void KillRecordedWorkers(const std::string& dir);

// The ddprun command line prefix: {ddprun path, args...}.
std::vector<std::string> Ddprun(std::vector<std::string> args);

// True when Debian's /usr/bin/python3 finds torch (without importing it:
// an import costs seconds on a loaded machine; the jobs' workers import
// it anyway).
bool HaveTorch();

}  // namespace ddprun::multinode
