#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/cli/launch_options.h"
#include "agent/cli/torch_version.h"
#include "agent/process/env_map.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// The environment torchrun's LocalElasticAgent gives worker `local_rank`
// (contract §2): `parent_env` plus RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK,
// ROLE_NAME, LOCAL_WORLD_SIZE, WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_{RESTART_COUNT, MAX_RESTARTS, RUN_ID,
// USE_AGENT_STORE, ERROR_FILE}, and what torchrun of `torch` (the
// workers' torch version) adds (agent/cli/torch_version.h):
// TORCHELASTIC_SIGNALS_TO_HANDLE (>= 2.9) and TORCH_NCCL_ASYNC_ERROR_HANDLING
// (>= 2.2) or NCCL_ASYNC_ERROR_HANDLING (inherited, else "1"), never both;
// OMP_NUM_THREADS (inherited, else "1" when nproc_per_node > 1) and, with
// --virtual_local_rank, LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES = the
// local_rank-th entry of the parent's list (or the local rank when unset).
// TORCHELASTIC_USE_AGENT_STORE is "True" when node 0's agent serves the
// c10d store on MASTER_PORT (UsesAgentStore: static multi-node mode),
// else "False": rank 0's worker hosts the c10d store.
//
// With options.contract kDeepSpeed: what deepspeed.launcher.launch gives
// (deepspeed/launcher/launch.py): `parent_env` plus RANK, LOCAL_RANK (RANK
// modulo nproc_per_node, as deepspeed computes it), WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, CROSS_RANK (the node rank), CROSS_SIZE (nodes)
// and LOCAL_SIZE (nproc_per_node); nothing else (the front end puts
// CUDA_VISIBLE_DEVICES into `parent_env`).
// Either way DDPRUN_RDZV_TOKEN and DDPRUN_RDZV_TOKEN_FILE (the agents'
// rendezvous secret) and DDPRUN_HTTP_TOKEN and DDPRUN_HTTP_ADMIN_TOKEN (the
// live view's) are removed.
EnvMap BuildWorkerEnv(const LaunchOptions& options, const TorchVersion& torch,
                      const rendezvous::RendezvousResult& round,
                      const std::string& run_id, int local_rank,
                      const std::string& error_file, const EnvMap& parent_env);

// A standby worker's environment (--standby_workers, standby_worker.h):
// BuildWorkerEnv of local rank 0 less every rank-specific variable (RANK,
// LOCAL_RANK, GROUP_RANK, ROLE_RANK, CROSS_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_ERROR_FILE, DDPRUN_GENERATION; with --virtual_local_rank
// CUDA_VISIBLE_DEVICES is the parent's, or unset) plus
// DDPRUN_STANDBY_FD=`standby_fd`. WORLD_SIZE stays: with no RANK beside it
// torch's env:// and ddprun's runtime refuse to start, so a program that
// does not know the standby protocol never joins the world as some rank.
EnvMap BuildStandbyEnv(const LaunchOptions& options, const TorchVersion& torch,
                       const rendezvous::RendezvousResult& round,
                       const std::string& run_id, const EnvMap& parent_env,
                       int standby_fd);

// A replacement under --restart_scope failed (docs/restart_scope.md):
// the generation it starts in, and DDPRUN_REPLACEMENT=1.
void AddReplacementEnv(int64_t generation, EnvMap* env);

// The files through which ddprun watches a worker (agent/watch/), each ""
// when that watching is off.
struct WorkerWatchFiles {
  std::string heartbeat;  // DDPRUN_WATCHDOG_FILE: --watchdog_timeout > 0
  std::string steps;      // DDPRUN_STEP_FILE: step counts (stragglers)
  std::string stacks;     // DDPRUN_STACKS_FILE: unless DDPRUN_STACKS=0
  // TORCHELASTIC_TIMER_FILE: torch's FileTimer pipe, with
  // TORCHELASTIC_ENABLE_FILE_TIMER=1 (file_timer_pipe.h).
  std::string timer;
};

// ddprun's own variables, beyond torchrun's contract, added to a worker's
// `env`: DDPRUN_WATCHDOG_FILE, DDPRUN_STEP_FILE, DDPRUN_STACKS_FILE and
// TORCHELASTIC_TIMER_FILE for the files that are set; with a stacks file also DDPRUN_STACKS_SIGNAL
// (StackDumpSignal()) and `python_helper_dir` (the folder of ddprun's
// sitecustomize.py and ddprun_steps.py; "" = none) appended last to
// PYTHONPATH, so the user's order (deepspeed's cwd first) stays and the
// folder still precedes the standard library's sitecustomize.py, which
// ddprun's chain-loads. A user's own sitecustomize.py on PYTHONPATH wins:
// that worker then answers no stack request.
void AddWatchEnv(const WorkerWatchFiles& files,
                 const std::string& python_helper_dir, EnvMap* env);

// The worker command line: `$PYTHON_EXEC|python3 -u [-m] entrypoint`, or the
// entrypoint itself with --no_python; legacy launch mode without --use_env
// adds `--local-rank=N` (`torch` >= 2.0, or unknown) or `--local_rank=N`
// before the entrypoint's own arguments, as that torch's
// torch.distributed.launch does.
// ddprun addition: an entrypoint that is an ELF binary (e.g. a C++ trainer)
// is executed directly even without --no_python, where torchrun would hand
// it to Python and fail. Reads the entrypoint's first 4 bytes.
// With contract kDeepSpeed, `--local_rank=N` follows the entrypoint (unless
// deepspeed_local_rank_arg is false), N = (rank_offset + local_rank) modulo
// nproc_per_node, deepspeed's LOCAL_RANK.
std::vector<std::string> BuildWorkerArgv(const LaunchOptions& options,
                                         const TorchVersion& torch,
                                         int local_rank,
                                         const EnvMap& parent_env,
                                         int rank_offset = 0);

// The name in the failure table title: the script or module for Python
// entrypoints, the entrypoint for --no_python (torchrun's
// _get_entrypoint_name).
std::string EntrypointName(const LaunchOptions& options);

// True when torchrun would set OMP_NUM_THREADS=1 and print its banner
// (never under deepspeed's launch or elastic agent: they set no thread
// count).
bool NeedsOmpDefault(const LaunchOptions& options, const EnvMap& parent_env);
// torchrun's banner, as its logger prints it (ends with '\n').
std::string OmpWarningBanner();

// "SIGTERM,SIGINT,..." for TORCHELASTIC_SIGNALS_TO_HANDLE.
std::string SignalListString(const std::vector<int>& signals);

// The parent's environment as a map (from `environ`).
EnvMap CurrentEnvironment();

}  // namespace ddprun::agent
