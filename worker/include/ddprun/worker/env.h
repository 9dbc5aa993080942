#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::worker {

// The worker side of torchrun's environment contract (see
// shared/reference/torchrun-contract.md §2), as a launcher (ddprun or
// torchrun) sets it for every worker process.
struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;  // node rank; GROUP_RANK
  std::string master_addr = "127.0.0.1";
  int master_port = 0;    // 0 when MASTER_PORT is unset (single process)
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;   // TORCHELASTIC_MAX_RESTARTS
  std::string run_id;     // TORCHELASTIC_RUN_ID
  // TORCHELASTIC_USE_AGENT_STORE == "True": the agent hosts the TCPStore and
  // every rank (rank 0 included) connects as a client, keys prefixed with
  // "/worker/attempt_<restart_count>" exactly as torch's env:// does.
  bool use_agent_store = false;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE; empty = none
  // DDPRUN_RESTART_SCOPE (docs/restart_scope.md): "group" (or unset: a
  // failure restarts every worker, torchrun's behaviour) or "failed" (only
  // the failed rank is started again; the others re-form in place).
  std::string restart_scope = "group";
  // DDPRUN_GENERATION: the generation this process starts in (0 at a group
  // start); DDPRUN_REPLACEMENT=1: it replaces a failed rank of a running
  // job and takes its state from a live peer instead of a checkpoint.
  int generation = 0;
  bool replacement = false;
  // True when none of RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT was set: the
  // process runs alone, no store or network is used.
  bool standalone = true;
};

// Reads the contract through `getenv` (injectable for tests; returns nullptr
// for unset variables). Errors (kInvalidArgument, one line naming the
// variable): a non-integer or out-of-range value, rank >= world_size,
// local_rank >= local_world_size, RANK set without WORLD_SIZE (or the
// reverse), WORLD_SIZE > 1 without MASTER_ADDR/MASTER_PORT, a
// DDPRUN_RESTART_SCOPE other than group/failed, a DDPRUN_REPLACEMENT other
// than 0/1, a replacement outside restart scope "failed" or in generation 0.
StatusOr<WorkerEnv> ParseWorkerEnv(
    const std::function<const char*(const char*)>& getenv);

// ParseWorkerEnv over the real process environment.
StatusOr<WorkerEnv> ReadWorkerEnv();

}  // namespace ddprun::worker
