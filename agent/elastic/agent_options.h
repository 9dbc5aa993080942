#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "agent/cli/launch_options.h"
#include "agent/cli/torch_version.h"
#include "common/clock.h"

namespace ddprun::agent {

class HealthChecker;
class WorkerProbe;
class WorkerStore;

// Everything one elastic agent runs on: the command line as parsed, and
// what main() resolved before starting it (the workers' torch, the
// rendezvous setup's view of this node, the run's directories and
// environment). Built once by main(); the agent only reads it.
struct AgentOptions {
  // The command line (never changed after parsing).
  LaunchOptions launch;
  // The torch the workers run: launch.torch_version when given, else what
  // DetectWorkerTorchVersion() found. It picks the NCCL error-handling
  // variable, TORCHELASTIC_SIGNALS_TO_HANDLE and the legacy --local-rank
  // spelling as that torch's launchers do; unknown = the newest torch.
  TorchVersion worker_torch;

  std::string run_id;  // TORCHELASTIC_RUN_ID
  // <log_dir>/<run_id>_<rand>, already created; "" = no log files at all
  // (--log_dir /dev/null): TORCHELASTIC_ERROR_FILE is empty, -r/-t are
  // ignored (every stream goes to the console) and the watchdog has no
  // heartbeat file (it still sees stopped workers).
  std::string run_log_dir;
  std::map<std::string, std::string> parent_env;  // what workers inherit
  std::string hostname;  // for the failure table; "" = getfqdn()
  // The agent's own TORCHELASTIC_ERROR_FILE ("" if unset): receives the root
  // cause's error file with errorCode added.
  std::string agent_error_file;

  // This node in the rendezvous.
  std::string node_id;  // unique per agent process
  // gethostname(), told to the rendezvous for status pages (the live
  // view); "" = none.
  std::string node_host;
  // Address announced as this node's MASTER_ADDR candidate; "" = the route
  // towards the rendezvous (--local_addr, or static node 0's --master_addr).
  std::string local_addr;
  // The group rank this node asks for; -1 = none.
  int node_rank_hint = -1;
  // Static multi-node mode: the round must give this node group rank
  // node_rank_hint exactly (else two nodes share a --node_rank: the job
  // fails with one clear line instead of running with surprising ranks).
  bool node_rank_exact = false;
  // How long one Join may take (rdzv_conf join_timeout).
  Clock::Duration join_timeout = std::chrono::seconds(600);

  // The folder with ddprun's sitecustomize.py (PythonStackHelperDir()),
  // appended to Python workers' PYTHONPATH so that they answer stack
  // requests; "" = not found (workers run without it).
  std::string python_stack_helper_dir;

  // --numa_binding: the CPUs of each local rank (agent/process/
  // numa_binding.h), set in each worker between fork and exec; empty = no
  // binding.
  std::vector<std::vector<int>> worker_cpus;

  // --health_check / --health_check_cmd: checks this node before each
  // rendezvous round (agent/elastic/health_check.h); null = no checks.
  // Must outlive the agent.
  HealthChecker* health = nullptr;

  // What the hang watchdog (launch.watchdog_timeout_s > 0) reads about
  // workers; null = the real one (/proc and stat(2)). Must outlive the agent.
  WorkerProbe* watchdog_probe = nullptr;

  // --restart_scope failed: the workers' store as this node serves it
  // (agent/elastic/worker_store.h); null = ranks are never replaced alone
  // (the scope is "group", or the mode cannot). Must outlive the agent.
  WorkerStore* worker_store = nullptr;
  // DDPRUN_GENERATION_SIGNAL (docs/restart_scope.md): sent to the node's
  // other running workers when a rank is replaced; 0 = none.
  int generation_signal = 0;
};

}  // namespace ddprun::agent
