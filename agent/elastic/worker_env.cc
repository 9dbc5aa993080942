#include "agent/elastic/worker_env.h"

#include <csignal>
#include <cstdio>

#include "agent/process/signal_names.h"
#include "agent/torch_probe/elf_deps.h"
#include "agent/watch/stack_collector.h"

extern char** environ;

namespace ddprun::agent {
namespace {

std::string InheritedOr(const EnvMap& env, const std::string& key,
                        const std::string& fallback) {
  auto it = env.find(key);
  return it == env.end() ? fallback : it->second;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

const std::vector<int>& DefaultSignals() {
  static const std::vector<int> kSignals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  return kSignals;
}

}  // namespace

std::string SignalListString(const std::vector<int>& signals) {
  const std::vector<int>& list = signals.empty() ? DefaultSignals() : signals;
  std::string out;
  for (int sig : list) {
    if (!out.empty()) out += ",";
    out += SignalName(sig);
  }
  return out;
}

EnvMap BuildWorkerEnv(const LaunchOptions& options, const TorchVersion& torch,
                      const rendezvous::RendezvousResult& round,
                      const std::string& run_id, int local_rank,
                      const std::string& error_file, const EnvMap& parent_env) {
  EnvMap env = parent_env;
  // The rendezvous token and the live view's tokens (--http_port; the
  // admin one stops the job) are the agents' secrets: a worker (user code,
  // its subprocesses, a crash dump of its environment) never sees them.
  for (const char* secret : {"DDPRUN_RDZV_TOKEN", "DDPRUN_RDZV_TOKEN_FILE",
                             "DDPRUN_HTTP_TOKEN", "DDPRUN_HTTP_ADMIN_TOKEN"}) {
    env.erase(secret);
  }
  if (options.contract == WorkerContract::kDeepSpeed) {
    const int rank = round.rank_offset + local_rank;
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(rank % options.nproc_per_node);
    env["WORLD_SIZE"] = std::to_string(round.world_size);
    env["MASTER_ADDR"] = round.master_addr;
    env["MASTER_PORT"] = std::to_string(round.master_port);
    env["CROSS_RANK"] = std::to_string(round.group_rank);
    env["CROSS_SIZE"] = std::to_string(round.group_world_size);
    env["LOCAL_SIZE"] = std::to_string(options.nproc_per_node);
    // Beyond deepspeed's contract: on several nodes node 0's agent serves
    // the c10d store on MASTER_PORT, and torch's env:// and tcp:// then
    // connect to it instead of binding it in rank 0.
    if (WorkersUseAgentStore(options)) {
      env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    }
    return env;
  }
  env["LOCAL_RANK"] =
      options.virtual_local_rank ? "0" : std::to_string(local_rank);
  env["RANK"] = std::to_string(round.rank_offset + local_rank);
  env["GROUP_RANK"] = std::to_string(round.group_rank);
  env["ROLE_RANK"] = std::to_string(round.role_rank_offset + local_rank);
  env["ROLE_NAME"] = options.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc_per_node);
  env["WORLD_SIZE"] = std::to_string(round.world_size);
  env["GROUP_WORLD_SIZE"] = std::to_string(round.group_world_size);
  env["ROLE_WORLD_SIZE"] = std::to_string(round.role_world_size);
  env["MASTER_ADDR"] = round.master_addr;
  env["MASTER_PORT"] = std::to_string(round.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(round.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = run_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] =
      WorkersUseAgentStore(options) ? "True" : "False";
  env["TORCHELASTIC_ERROR_FILE"] = error_file;
  // What torchrun of the workers' torch version sets, and nothing more: torch
  // >= 2.2 warns on every rank when the old NCCL name is set.
  if (ExportsSignalsToHandle(torch)) {
    env["TORCHELASTIC_SIGNALS_TO_HANDLE"] =
        SignalListString(options.signals_to_handle);
  }
  const std::string nccl = NcclAsyncErrorHandlingVar(torch);
  env[nccl] = InheritedOr(parent_env, nccl, "1");
  if (NeedsOmpDefault(options, parent_env)) env["OMP_NUM_THREADS"] = "1";
  if (options.virtual_local_rank) {
    auto it = parent_env.find("CUDA_VISIBLE_DEVICES");
    std::string device = std::to_string(local_rank);
    if (it != parent_env.end() && !it->second.empty()) {
      std::vector<std::string> devices = SplitCommas(it->second);
      if (local_rank < static_cast<int>(devices.size())) {
        device = devices[local_rank];
      }
    }
    env["CUDA_VISIBLE_DEVICES"] = device;
    // Every rank sees one GPU of its own while LOCAL_WORLD_SIZE still
    // counts the node's ranks: ddprun's C++ worker would read that as N
    // ranks sharing one GPU (Gloo on CUDA under `auto`, exit 2 under
    // `nccl`; worker/backend_choice.h) without this.
    env["DDPRUN_GPU_PER_RANK"] = "1";
  }
  if (ReplacesFailedRanks(options)) {
    // docs/restart_scope.md: a group start is generation 0.
    env["DDPRUN_RESTART_SCOPE"] = "failed";
    env["DDPRUN_GENERATION"] = "0";
    char timeout[32];
    std::snprintf(timeout, sizeof(timeout), "%g", options.heal_timeout_s);
    env["DDPRUN_HEAL_TIMEOUT_S"] = timeout;
  }
  return env;
}

EnvMap BuildStandbyEnv(const LaunchOptions& options, const TorchVersion& torch,
                       const rendezvous::RendezvousResult& round,
                       const std::string& run_id, const EnvMap& parent_env,
                       int standby_fd) {
  EnvMap env = BuildWorkerEnv(options, torch, round, run_id, 0, "", parent_env);
  for (const char* rank_specific :
       {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "CROSS_RANK",
        "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE",
        "DDPRUN_GENERATION", "CUDA_VISIBLE_DEVICES"}) {
    env.erase(rank_specific);
  }
  auto devices = parent_env.find("CUDA_VISIBLE_DEVICES");
  if (devices != parent_env.end()) env[devices->first] = devices->second;
  env["DDPRUN_STANDBY_FD"] = std::to_string(standby_fd);
  return env;
}

void AddReplacementEnv(int64_t generation, EnvMap* env) {
  (*env)["DDPRUN_GENERATION"] = std::to_string(generation);
  (*env)["DDPRUN_REPLACEMENT"] = "1";
}

void AddWatchEnv(const WorkerWatchFiles& files,
                 const std::string& python_helper_dir, EnvMap* env) {
  if (!files.heartbeat.empty()) {
    (*env)["DDPRUN_WATCHDOG_FILE"] = files.heartbeat;
  }
  if (!files.steps.empty()) (*env)["DDPRUN_STEP_FILE"] = files.steps;
  if (!files.timer.empty()) (*env)["TORCHELASTIC_TIMER_FILE"] = files.timer;
  if (files.stacks.empty()) return;
  (*env)["DDPRUN_STACKS_FILE"] = files.stacks;
  (*env)["DDPRUN_STACKS_SIGNAL"] = std::to_string(StackDumpSignal());
  if (python_helper_dir.empty()) return;
  std::string& path = (*env)["PYTHONPATH"];
  path = path.empty() ? python_helper_dir : path + ":" + python_helper_dir;
}

std::vector<std::string> BuildWorkerArgv(const LaunchOptions& options,
                                         const TorchVersion& torch,
                                         int local_rank,
                                         const EnvMap& parent_env,
                                         int rank_offset) {
  std::vector<std::string> argv;
  // --run_path runs the script in-process in torchrun; here it is a plain
  // script run, which behaves the same for a script entrypoint.
  bool exec_directly =
      options.no_python || (!options.module && IsElfFile(options.entrypoint));
  if (exec_directly && !options.run_path) {
    argv.push_back(options.entrypoint);
  } else {
    argv.push_back(InheritedOr(parent_env, "PYTHON_EXEC", "python3"));
    argv.push_back("-u");
    if (options.module && !options.run_path) argv.push_back("-m");
    argv.push_back(options.entrypoint);
  }
  if (options.contract == WorkerContract::kDeepSpeed) {
    if (options.deepspeed_local_rank_arg) {
      argv.push_back(
          "--local_rank=" +
          std::to_string((rank_offset + local_rank) % options.nproc_per_node));
    }
  } else if (options.legacy_launch && !options.use_env) {
    argv.push_back(std::string(LegacyLocalRankFlag(torch)) + "=" +
                   std::to_string(local_rank));
  }
  argv.insert(argv.end(), options.entrypoint_args.begin(),
              options.entrypoint_args.end());
  return argv;
}

std::string EntrypointName(const LaunchOptions& options) {
  return options.entrypoint;
}

bool NeedsOmpDefault(const LaunchOptions& options, const EnvMap& parent_env) {
  return options.contract == WorkerContract::kTorchrun && options.omp_default &&
         options.nproc_per_node > 1 && !parent_env.count("OMP_NUM_THREADS");
}

std::string OmpWarningBanner() {
  return "WARNING:torch.distributed.run:\n"
         "*****************************************\n"
         "Setting OMP_NUM_THREADS environment variable for each process to be "
         "1 in default, to avoid your system being overloaded, please further "
         "tune the variable for optimal performance in your application as "
         "needed. \n"
         "*****************************************\n";
}

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

}  // namespace ddprun::agent
