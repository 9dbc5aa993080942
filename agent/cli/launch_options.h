#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cli/torch_version.h"
#include "rendezvous/options/rendezvous_options.h"

namespace ddprun::agent {

// Which standard streams of a worker go to files (redirect) or to files and
// the console (tee). Bitmask as torchrun's Std: 1 = stdout, 2 = stderr.
enum class StdStreams : int { kNone = 0, kOut = 1, kErr = 2, kAll = 3 };

// torchrun's `-r/-t` value: one mask for every local rank, or a per-rank map
// ("0:1,1:2"); ranks missing from a map get kNone.
struct StdSpec {
  StdStreams all = StdStreams::kNone;
  std::map<int, StdStreams> per_rank;  // non-empty only for the map form
  bool is_map = false;

  StdStreams ForRank(int local_rank) const {
    if (!is_map) return all;
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? StdStreams::kNone : it->second;
  }
};

// Whose contract the workers get: which variables and arguments they see.
enum class WorkerContract {
  kTorchrun,   // torchrun's (agent/elastic/worker_env.h)
  kDeepSpeed,  // deepspeed.launcher.launch's (ddprun-deepspeed)
};

// Everything the command line (and PET_* / SLURM_* environment defaults) says
// about one launch. Filled by ParseCommandLine() (agent/cli/cli_parser.h) or a
// front end's equivalent, and never changed afterwards: what main()
// resolves at run time (the workers' torch, the rendezvous it builds) goes
// into AgentOptions (agent/elastic/agent_options.h). Defaults are torchrun's unless
// noted.
struct LaunchOptions {
  // --nnodes N | MIN:MAX. 0 < min_nodes <= max_nodes.
  int min_nodes = 1;
  int max_nodes = 1;
  // --nproc_per_node as given ("1", "4", "cpu", "gpu", "auto") and resolved
  // to a count >= 1 at parse time.
  std::string nproc_per_node_spec = "1";
  int nproc_per_node = 1;

  // Rendezvous. backend: "static" | "c10d" | "grpc" (c10d is accepted as an
  // alias of grpc). endpoint "host[:port]", empty = none given.
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  // --rdzv_conf k=v,k=v (and $DDPRUN_RDZV_TOKEN where a rendezvous server
  // is used), read and checked once by the parser.
  rendezvous::RendezvousOptions rendezvous;
  bool standalone = false;  // forces embedded rendezvous, fresh run id

  int max_restarts = 0;
  double monitor_interval_s = 0.1;     // accepted; detection is event-driven
  std::string start_method = "spawn";  // accepted, no effect (as torchrun
                                       // for script entrypoints)
  std::string role = "default";

  // Entrypoint interpretation.
  bool module = false;     // -m: python -u -m entrypoint
  bool no_python = false;  // exec entrypoint directly
  bool run_path = false;   // treated as a plain script run

  // Logs. log_dir empty = a fresh mkdtemp("torchelastic_") directory.
  std::string log_dir;
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::set<int>> local_ranks_filter;  // console only
  // $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, checked at parse time; "" =
  // torchrun's `[<role><local_rank>]:` (agent/cli/log_line_prefix.h).
  std::string log_line_prefix_template;
  // --duplicate_stdout_filters / --duplicate_stderr_filters (",," escapes
  // a comma): the lines of tee'd streams that contain one of these
  // substrings are also copied to attempt_<k>/filtered_stdout.log /
  // filtered_stderr.log (agent/process/filtered_log.h). Empty = no file.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // --numa_binding: "" = none, else node, socket, exclusive or core-complex
  // (agent/process/numa_binding.h).
  std::string numa_binding;

  // Static rendezvous / addressing.
  int node_rank = 0;  // -1 would mean "no hint" for grpc
  bool node_rank_given = false;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // nullopt = pick a verified-free port
  std::string local_addr;          // empty = auto (routable IP, not FQDN)

  // Shutdown and signals.
  std::vector<int> signals_to_handle;  // default SIGTERM,SIGINT,SIGHUP,SIGQUIT
  double shutdown_timeout_s = 30.0;    // SIGTERM -> SIGKILL grace
  double exit_barrier_timeout_s = 300.0;
  bool virtual_local_rank = false;
  // ddprun addition: seconds a worker may stay stopped (state T) or, once it
  // touched DDPRUN_WATCHDOG_FILE, go without touching it, before the agent
  // kills it as hung. 0 = off.
  double watchdog_timeout_s = 0;
  // ddprun addition: a rank whose step rate stays below the job's median
  // divided by straggler_factor for straggler_time_s seconds is warned
  // about. 0 = no warnings (the rates are still kept and reported).
  double straggler_factor = 2.0;
  double straggler_time_s = 30.0;
  // ddprun addition: the live view of the rendezvous this agent hosts
  // (rendezvous/http/live_view.h): --http_port (-1 = off, 0 = any free
  // port), --http_host, and its tokens (--http_token / DDPRUN_HTTP_TOKEN
  // to read, --http_admin_token / DDPRUN_HTTP_ADMIN_TOKEN to act).
  int http_port = -1;
  std::string http_host = "127.0.0.1";
  std::string http_token;
  std::string http_admin_token;
  // ddprun addition: retry a worker group whose first attempt failed with
  // exit code 2 (a usage error) like any failure, as torchrun does. By
  // default such a job fails at once.
  bool retry_usage_errors = false;
  // ddprun addition: check this node before each rendezvous round; a node
  // that fails does not join (agent/elastic/health_check.h).
  // --health_check: the built-in checks (log dir, /dev/shm, the paths,
  // GPUs through nvidia-smi). --health_check_cmd: a command that must
  // exit 0 (also without --health_check).
  bool health_check = false;
  std::string health_check_cmd;
  std::vector<std::string> health_check_paths;
  double health_check_gpu_mem_mb = 1024;  // most MiB in use per GPU
  double health_check_shm_mb = 256;       // least /dev/shm size
  double health_check_timeout_s = 30;     // per command, and GPU memory wait
  // ddprun addition: stop restarting once this many restarts in a row
  // advanced no rank's step counter (agent/elastic/progress_budget.h).
  // 0 = off.
  int max_restarts_without_progress = 0;
  // ddprun addition: --restart_scope. kGroup (torchrun's): a failed worker
  // restarts every worker of every node. kFailed: it is started again
  // alone and heals from a live peer while the others run
  // (docs/restart_scope.md); --heal_timeout bounds each heal.
  enum class RestartScope { kGroup, kFailed };
  RestartScope restart_scope = RestartScope::kGroup;
  double heal_timeout_s = 120;
  // ddprun addition: --standby_workers (with --restart_scope failed only):
  // one standby process per node, its libraries loaded, takes a failed
  // rank over (agent/elastic/standby_worker.h). Programs whose main goes
  // through ddprun::worker::RunMain only; Python entrypoints are refused.
  bool standby_workers = false;

  // --torch_version; unknown = not given (main() then detects it:
  // AgentOptions::worker_torch).
  TorchVersion torch_version;

  // ddprun-deepspeed: the workers get deepspeed.launcher.launch's contract
  // instead of torchrun's, with `--local_rank=N` appended unless
  // deepspeed_local_rank_arg is false (--no_local_rank).
  WorkerContract contract = WorkerContract::kTorchrun;
  bool deepspeed_local_rank_arg = true;
  // torchrun's OMP_NUM_THREADS=1 (and banner) for several workers when the
  // variable is unset; off for deepspeed's elastic agent, which has none.
  bool omp_default = true;

  // Legacy torch.distributed.launch behaviour (ddprun-launch or --legacy).
  bool legacy_launch = false;
  bool use_env = false;  // legacy: if false, "--local-rank=N" (torch >= 2.0)
                         // or "--local_rank=N" is appended

  // What to run and its arguments, passed through untouched.
  std::string entrypoint;
  std::vector<std::string> entrypoint_args;
};

// Which rendezvous a launch uses (agent/hosting/rendezvous_factory.h builds
// it).
enum class RendezvousMode {
  kLocal,       // static or grpc with --nnodes=1 and no endpoint: no server
  kStandalone,  // --standalone: the gRPC server in-process, on loopback
  kGrpc,        // --rdzv_backend=grpc|c10d with an endpoint
  kStatic,      // static with --nnodes=N>1: node 0 hosts the gRPC server
};
RendezvousMode ModeOf(const LaunchOptions& options);

// True when node 0's agent serves the workers' c10d store on --master_port
// beside the rendezvous (static multi-node mode without rdzv_conf TLS):
// workers get MASTER_PORT = --master_port and
// TORCHELASTIC_USE_AGENT_STORE=True (agent/hosting/agent_store.h).
bool UsesAgentStore(const LaunchOptions& options);

// --restart_scope failed can replace ranks alone: an agent serves the
// workers' store, which outlives them (static mode: when UsesAgentStore;
// the other modes: the round's group rank 0 serves it on MASTER_PORT).
// Static mode with rdzv_conf TLS cannot (its workers host the store).
bool ReplacesFailedRanks(const LaunchOptions& options);

// Workers get TORCHELASTIC_USE_AGENT_STORE=True: UsesAgentStore or
// ReplacesFailedRanks.
bool WorkersUseAgentStore(const LaunchOptions& options);

}  // namespace ddprun::agent
