#include "agent/cli/cli_flags.h"

#include <cctype>

namespace ddprun::agent {
namespace {

constexpr FlagKind kV = FlagKind::kValue;
constexpr FlagKind kB = FlagKind::kBool;

std::vector<FlagSpec> MakeFlags() {
  // Defaults and wording follow torch/distributed/run.py; where ddprun
  // differs (monitor_interval, master_port) the text says so.
  return {
      {"help", 'h', FlagKind::kHelp, nullptr, nullptr,
       "show this help message and exit", false, false},
      {"version", 0, FlagKind::kVersion, nullptr, nullptr,
       "ddprun addition: print ddprun's version and exit", false, false},
      {"nnodes", 0, kV, "NNODES", "1:1",
       "Number of nodes, or the range of nodes as MIN:MAX (0 < MIN <= MAX).",
       false, false},
      {"nproc_per_node", 0, kV, "NPROC_PER_NODE", "1",
       "Workers per node: an int >= 1, cpu (online CPUs), gpu (NVIDIA GPUs, "
       "limited by CUDA_VISIBLE_DEVICES), auto (gpu if any, else cpu), xpu or "
       "the privateuse1 backend's name (counted by the workers' torch).",
       false, false},
      {"rdzv_backend", 0, kV, "RDZV_BACKEND", "static",
       "Rendezvous backend: static, c10d or grpc (c10d is served by ddprun's "
       "grpc rendezvous; etcd is not supported).",
       false, false},
      {"rdzv_endpoint", 0, kV, "RDZV_ENDPOINT", "",
       "Rendezvous endpoint host[:port]; IPv6 as [addr]:port.", false, false},
      {"rdzv_id", 0, kV, "RDZV_ID", "none",
       "User-defined job id; becomes TORCHELASTIC_RUN_ID.", false, false},
      {"rdzv_conf", 0, kV, "RDZV_CONF", "",
       "Extra rendezvous configuration as key1=value1,key2=value2; unknown "
       "keys are errors (rendezvous/README.md lists them).",
       false, false},
      {"standalone", 0, kB, nullptr, "off",
       "Single-node job with an embedded rendezvous on a free port and a "
       "fresh run id; explicit --rdzv_* flags are ignored.",
       false, false},
      {"max_restarts", 0, kV, "MAX_RESTARTS", "0",
       "Worker-group restarts allowed before the job fails (>= 0).", false,
       false},
      {"monitor_interval", 0, kV, "MONITOR_INTERVAL", "0.1",
       "Seconds between worker polls in torchrun (> 0). Accepted; ddprun "
       "reacts to worker exits as they happen.",
       false, false},
      {"start_method", 0, kV, "START_METHOD", "spawn",
       "spawn, fork or forkserver. Accepted; like torchrun, it does not change "
       "how script workers start.",
       false, false},
      {"role", 0, kV, "ROLE", "default",
       "User-defined role of the workers (ROLE_NAME, log prefix).", false,
       false},
      {"module", 'm', kB, nullptr, "off",
       "Run the entrypoint as a Python module: python -u -m ENTRYPOINT.", false,
       false},
      {"no_python", 0, kB, nullptr, "off",
       "Execute the entrypoint directly instead of through Python.", false,
       false},
      {"run_path", 0, kB, nullptr, "off",
       "Run the script with runpy.run_path in torchrun; ddprun runs it as a "
       "plain script. Takes precedence over --no_python.",
       false, false},
      {"log_dir", 0, kV, "LOG_DIR", "a fresh torchelastic_* temp dir",
       "Base directory for worker log files; /dev/null writes none (every "
       "stream goes to the console, TORCHELASTIC_ERROR_FILE is empty).",
       false, false},
      {"redirects", 'r', kV, "REDIRECTS", "0",
       "Redirect worker streams to files: 0-3 (1=stdout, 2=stderr, 3=both) "
       "or per local rank, e.g. 0:1,1:2.",
       false, false},
      {"tee", 't', kV, "TEE", "0",
       "Tee worker streams to files and the console (same format as -r).",
       false, false},
      {"local_ranks_filter", 0, kV, "LOCAL_RANKS_FILTER", "all ranks",
       "Show only these local ranks on the console, e.g. 0,1; files keep "
       "everything.",
       false, false},
      {"node_rank", 0, kV, "NODE_RANK", "0",
       "Rank of this node (static backend; a hint for grpc).", false, false},
      {"master_addr", 0, kV, "MASTER_ADDR", "127.0.0.1",
       "Address of the rank-0 node (static backend); IPv6 as [addr].", false,
       false},
      {"master_port", 0, kV, "MASTER_PORT",
       "a free port on one node, 29500 on several",
       "Port of the rank-0 node (static backend); 0 = pick a free port (one "
       "node only).",
       false, false},
      {"local_addr", 0, kV, "LOCAL_ADDR", "this node's routable IP",
       "Address other nodes use to reach this node.", false, false},
      {"signals_to_handle", 0, kV, "SIGNALS_TO_HANDLE",
       "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
       "Signals forwarded to the workers (TORCHELASTIC_SIGNALS_TO_HANDLE).",
       false, false},
      {"shutdown_timeout", 0, kV, "SHUTDOWN_TIMEOUT",
       "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30",
       "Seconds between SIGTERM and SIGKILL when stopping workers.", false,
       false},
      {"exit_barrier_timeout", 0, kV, "EXIT_BARRIER_TIMEOUT", "300",
       "Seconds a finished node waits for the others before exiting.", false,
       false},
      {"watchdog_timeout", 0, kV, "SECONDS", "0 = off",
       "ddprun addition: a worker that stays stopped (state T) this long, or "
       "that called ddprun::worker::Heartbeat() (it touches "
       "$DDPRUN_WATCHDOG_FILE) and then did not for this long, is killed "
       "(SIGKILL) and counts as a failed worker; the group restarts while "
       "--max_restarts lasts. Choose more than the longest step or "
       "checkpoint.",
       false, false},
      {"straggler_factor", 0, kV, "FACTOR", "2, 0 = off",
       "ddprun addition: warn when a rank's step rate (workers that call "
       "ddprun_steps.step() or ddprun::worker::Heartbeat() each step) stays "
       "below the job's median divided by FACTOR for --straggler_time "
       "seconds.",
       false, false},
      {"straggler_time", 0, kV, "SECONDS", "30",
       "ddprun addition: how long a rank must stay that slow before the "
       "straggler warning.",
       false, false},
      {"http_port", 0, kV, "PORT", "off",
       "ddprun addition: serve the live view of the rendezvous this agent "
       "hosts (--standalone, or the host of --rdzv_endpoint): a page that "
       "updates itself, /api/v1/jobs (JSON), /metrics (Prometheus), "
       "/healthz, /readyz. 0 = any free port (the log line names it).",
       false, false},
      {"http_host", 0, kV, "HOST", "127.0.0.1",
       "ddprun addition: address of the live view; any other than a "
       "loopback address needs --http_token.",
       false, false},
      {"http_token", 0, kV, "TOKEN", "$DDPRUN_HTTP_TOKEN, else none",
       "ddprun addition: token to read the live view (Authorization: Bearer, "
       "or its login form).",
       false, false},
      {"http_admin_token", 0, kV, "TOKEN",
       "$DDPRUN_HTTP_ADMIN_TOKEN, else none (no actions)",
       "ddprun addition: token for the live view's actions (dump stacks, "
       "stop the job).",
       false, false},
      {"torch_version", 0, kV, "VERSION", "detected from the workers' torch",
       "ddprun addition: the torch version the workers run (e.g. 2.6 or "
       "1.13), which decides what torchrun of that version would give them: "
       "TORCH_NCCL_ASYNC_ERROR_HANDLING from 2.2 (NCCL_ASYNC_ERROR_HANDLING "
       "before), TORCHELASTIC_SIGNALS_TO_HANDLE from 2.9, --local-rank from "
       "2.0 (--local_rank before) for torch.distributed.launch. Detected "
       "without importing torch: the torch package on the sys.path of "
       "$PYTHON_EXEC (asked once, cached), or the LibTorch a compiled "
       "entrypoint links; when none is found, the newest torch.",
       false, false},
      {"retry_usage_errors", 0, kB, nullptr, "off",
       "ddprun addition: retry a worker that exits with code 2 (a usage or "
       "configuration error) on the first attempt like any failure, as "
       "torchrun does; by default the job fails at once.",
       false, false},
      {"max_restarts_without_progress", 0, kV, "N", "0 = off",
       "ddprun addition: stop restarting after N restarts in a row in which "
       "no rank advanced its step counter (ddprun_steps.step() or "
       "ddprun::worker::Heartbeat()); counted once a rank has counted a "
       "step.",
       false, false},
      {"health_check", 0, kB, nullptr, "off",
       "ddprun addition: before each rendezvous round check this node (the "
       "log dir is writable, /dev/shm is big enough, --health_check_paths "
       "exist, every visible GPU is listed by nvidia-smi and has little "
       "memory in use; GPUs are skipped without nvidia-smi); a node that "
       "fails says why, is counted by the rendezvous' bad-host policy and "
       "exits 1. Before a restart it waits for the previous workers' GPU "
       "memory.",
       false, false},
      {"health_check_cmd", 0, kV, "CMD", "none",
       "ddprun addition: a shell command that must exit 0 before each round "
       "(also without --health_check).",
       false, false},
      {"health_check_paths", 0, kV, "PATHS", "none",
       "ddprun addition: comma-separated paths that must exist (data, "
       "checkpoints).",
       false, false},
      {"health_check_gpu_mem_mb", 0, kV, "MIB", "1024",
       "ddprun addition: most GPU memory in use (MiB) a visible GPU may have "
       "before the workers start.",
       false, false},
      {"health_check_shm_mb", 0, kV, "MIB", "256",
       "ddprun addition: least size of /dev/shm in MiB.", false, false},
      {"health_check_timeout", 0, kV, "SECONDS", "30",
       "ddprun addition: bound on each check command (nvidia-smi, "
       "--health_check_cmd) and on the wait for GPU memory before a "
       "restart.",
       false, false},
      {"restart_scope", 0, kV, "{group,failed}", "group",
       "ddprun addition: what a failed worker restarts. group (torchrun's): "
       "every worker of every node, from the last checkpoint. failed: that "
       "worker alone, with the same RANK, while every other worker keeps "
       "running; it heals from a live peer (workers built on ddprun's "
       "worker runtime, or Python scripts using ddprun_elastic; "
       "docs/restart_scope.md). A second failure while healing, a heal "
       "past --heal_timeout or a failure before any step falls back to a "
       "group restart. Each replacement counts against --max_restarts.",
       false, false},
      {"heal_timeout", 0, kV, "SECONDS", "120",
       "ddprun addition: --restart_scope failed: how long a replacement "
       "may take to heal before the group restarts "
       "(DDPRUN_HEAL_TIMEOUT_S for the workers). A lost node's place stays "
       "open for a joining node half of it (at most join_timeout).",
       false, false},
      {"standby_workers", 0, kB, nullptr, "off",
       "ddprun addition: --restart_scope failed: each node keeps one "
       "standby process of the worker command, its libraries loaded, that "
       "takes a failed rank over in milliseconds instead of a new process "
       "(programs whose main goes through ddprun::worker::RunMain, the C++ "
       "worker runtime; not Python scripts; docs/restart_scope.md).",
       false, false},
      {"virtual_local_rank", 0, kB, nullptr, "off",
       "Give every worker LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES=<its GPU>.",
       false, false},
      {"logs_specs", 0, kV, "LOGS_SPECS", "none",
       "torchrun LogsSpecs plugin name: only 'default' (torchrun's one "
       "registered name) is accepted; no effect in ddprun.",
       false, true},
      {"event_log_handler", 0, kV, "EVENT_LOG_HANDLER", "null",
       "torchrun events handler (null, console, dynamic_rendezvous). "
       "Accepted; no effect in ddprun.",
       false, true},
      {"numa_binding", 0, kV, "NUMA_BINDING", "none",
       "Bind each worker (between fork and exec) to the CPUs near the GPU "
       "of its local rank, as torch >= 2.8: node (the GPU's NUMA node), "
       "socket (every NUMA node of its socket), exclusive (an equal share "
       "of its node's physical cores), core-complex (one L3 cache's CPUs). "
       "Without GPUs ddprun spreads local ranks over the NUMA nodes.",
       false, false},
      {"duplicate_stdout_filters", 0, kV, "FILTERS", "none",
       "Copy lines of tee'd (-t) stdout that contain any of these "
       "comma-separated substrings (,, escapes a comma) to "
       "attempt_<k>/filtered_stdout.log.",
       false, false},
      {"duplicate_stderr_filters", 0, kV, "FILTERS", "none",
       "The same for tee'd stderr: attempt_<k>/filtered_stderr.log.", false,
       false},
      {"legacy_launch", 0, kB, nullptr, "off",
       "Behave as torch.distributed.launch (same as running ddprun-launch).",
       false, false},
      {"use_env", 0, kB, nullptr, "off",
       "torch.distributed.launch only: without it each worker gets "
       "--local-rank=N (torch >= 2.0) or --local_rank=N (torch 1.x) appended "
       "to its arguments.",
       true, false},
  };
}

}  // namespace

const std::vector<FlagSpec>& AllFlags() {
  static const std::vector<FlagSpec>* flags =
      new std::vector<FlagSpec>(MakeFlags());
  return *flags;
}

std::string PetEnvName(const FlagSpec& flag) {
  std::string name = "PET_";
  for (const char* p = flag.dest; *p; ++p) {
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  }
  return name;
}

}  // namespace ddprun::agent
