#pragma once

// The chaos suite's harness: a scenario directory with the deterministic
// workload (chaos_workload.cc), ddprun agents and ddprun-rendezvous servers
// started as real processes (tests/multinode's Child), the workload's event
// log and result, the uninterrupted baseline, and a /proc scan for every
// process a scenario started (they all carry CHAOS_MARKER=<unique token> in
// their environment, inherited by the workers). Every wait has a deadline;
// the Scenario destructor kills whatever is left, also when a check failed.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/multinode/multinode_util.h"

namespace ddprun::chaos {

using multinode::Child;
using multinode::SteadyClock;
using namespace std::chrono_literals;

// The job: its result depends on the world size and the step count only.
struct Workload {
  int64_t steps = 40;
  int64_t ckpt_every = 10;
  int step_ms = 50;
  std::vector<std::string> extra;  // fault flags (--fail_step ...)
};

// One line of <out>/events (see chaos_workload.cc).
struct Event {
  std::string kind;   // "start", "saved", "fail"
  int attempt = -1;   // start
  int world = 0;      // start
  int64_t step = -1;  // start: resume step; saved/fail: the step
  int pid = 0;
  double t = 0;  // wall seconds
};
std::vector<Event> ReadEvents(const std::string& out_dir);

// <out>/result: the parameters after the last step.
struct Result {
  std::string head;  // "steps=.. world=.. fnv=.."
  std::vector<double> params;
};
std::optional<Result> ReadResult(const std::string& out_dir);
// Largest |a - b| over the parameters (infinity when the shapes differ).
double MaxAbsDiff(const Result& a, const Result& b);
// The fnv of the parameter bytes (bit-exact comparison).
std::string Fnv(const Result& r);

// The uninterrupted run's result with `world` ranks: computed once with
// `ddprun --standalone` and cached in the build tree, keyed by the workload
// binary (mtime and size), under a file lock. Its gradients go over Gloo,
// as the scenarios' two-agent jobs' do. nullopt when that run failed.
std::optional<Result> Baseline(int world, int64_t steps);

double WallNow();

// A live process (not a zombie) started by a scenario.
struct MarkedProcess {
  int pid = 0;
  int ppid = 0;
  std::string comm;
  std::map<std::string, std::string> env;
};
std::vector<MarkedProcess> MarkedProcesses(const std::string& marker);

// Resources the kernel accounts to one process.
struct ProcessResources {
  int fds = 0;
  int listening_tcp = 0;  // of its sockets, those in LISTEN state
  int threads = 0;
  int children = 0;  // live processes whose parent it is
};
ProcessResources ResourcesOf(int pid);

class Scenario {
 public:
  explicit Scenario(const std::string& name);
  ~Scenario();
  Scenario(const Scenario&) = delete;
  Scenario& operator=(const Scenario&) = delete;

  const std::string& dir() const { return dir_.path(); }
  const std::string& out() const { return out_; }
  const std::string& marker() const { return marker_; }
  // Checkpoint directory (a mount point may be placed on it before use).
  const std::string& ckpt() const { return ckpt_; }

  // Environment of an agent on `node` (inherited by its workers).
  std::map<std::string, std::string> Env(const std::string& node) const;
  // Adds a variable to the environment of agents started from now on.
  void SetEnv(const std::string& name, const std::string& value) {
    extra_env_[name] = value;
  }

  // ddprun <flags> --no_python chaos_workload <workload args>, optionally
  // behind `prefix` (ip netns exec NS). Output in <dir>/<node>.out|.err.
  Child& StartAgent(const std::string& node,
                    const std::vector<std::string>& flags, const Workload& w,
                    const std::vector<std::string>& prefix = {});
  // The i-th agent started.
  Child& agent(size_t i) { return *agents_.at(i); }
  // A ddprun-rendezvous on `host`:`port` (0 = any); port() == 0 if it did
  // not come up.
  multinode::RendezvousServerProcess& StartServer(
      int port, const std::vector<std::string>& prefix = {},
      const std::string& host = "127.0.0.1");

  // The pid of the newest attempt's worker `local_rank` of `node`; 0 when
  // none shows up within `timeout`.
  int WorkerPid(const std::string& node, int local_rank,
                std::chrono::milliseconds timeout = 20s);
  // Waits until `pred` holds for the event log.
  bool WaitForEvents(const std::function<bool(const std::vector<Event>&)>& pred,
                     std::chrono::milliseconds timeout);
  // Waits until checkpoint `step` was saved.
  bool WaitSaved(int64_t step, std::chrono::milliseconds timeout = 30s);
  // The newest saved step so far (0 if none).
  int64_t LastSaved() const;
  // Seconds from wall time `t0` to the first "start" event after it.
  std::optional<double> RestartedAfter(double t0) const;
  // First "start" event after `t0`.
  std::optional<Event> StartAfter(double t0) const;

  // True when no process of this scenario is alive (waits up to `timeout`).
  bool NoOrphans(std::chrono::milliseconds timeout = 5s) const;
  // Output of every agent and server, for failure messages.
  std::string Logs() const;

 private:
  multinode::TempDir dir_;
  std::string out_, ckpt_, marker_;
  std::vector<std::unique_ptr<Child>> agents_;
  std::vector<std::unique_ptr<multinode::RendezvousServerProcess>> servers_;
  std::vector<std::string> log_names_;
  std::map<std::string, std::string> extra_env_;
};

// Workload command line (without the binary) for a scenario.
std::vector<std::string> WorkloadArgs(const Scenario& s, const Workload& w);

// `chaos: <what> recovered in 1.23 s` on stdout.
void PrintRecovery(const std::string& what, double seconds);

}  // namespace ddprun::chaos
