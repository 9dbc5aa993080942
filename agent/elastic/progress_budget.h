#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::agent {

// --max_restarts_without_progress N (ddprun addition, after NVIDIA's
// resiliency launcher; 0 = off): a job whose restarts keep failing before
// any rank advances its step counter (DDPRUN_STEP_FILE, written by
// ddprun_steps.step() or ddprun::worker::Heartbeat()) stops restarting
// after N such restarts in a row, instead of spending all of
// --max_restarts on a crash that every attempt meets (a corrupt
// checkpoint, a broken node, a bad data shard).
//
// Progress is what this node's ranks counted (in data-parallel training
// every rank steps together). Until some rank of the job has counted a
// step, progress is unknown and nothing is counted: a script that never
// calls ddprun_steps is never stopped by this budget. Plain logic, not
// thread-safe.
class ProgressBudget {
 public:
  explicit ProgressBudget(int limit) : limit_(limit) {}

  // An attempt ended in a worker failure. `restart`: the attempt was a
  // restart (not the job's first). `steps`: the highest step count a local
  // rank wrote during it (-1 = no rank wrote one). True: the job must not
  // restart again (`limit` restarts in a row advanced no rank).
  bool OnFailedAttempt(bool restart, int64_t steps);

  int limit() const { return limit_; }
  // Restarts in a row that made no progress.
  int streak() const { return streak_; }

 private:
  const int limit_;
  bool counted_ = false;  // some attempt counted a step
  int streak_ = 0;
};

// Why a failed attempt is final while the restart budget lasts, "" when it
// is restarted: exit code 2 (argparse's usage error, the trainers'
// ConfigError) from the root cause on the job's first attempt (`attempt`
// 1) is a usage or configuration error that every retry meets, unless
// `retry_usage_errors`; otherwise the attempt counts against `budget`
// (OnFailedAttempt with `step_files`' highest count) and may spend it.
std::string NotRetriedReason(int root_local_rank, int root_exitcode,
                             int attempt, bool retry_usage_errors,
                             const std::vector<std::string>& step_files,
                             ProgressBudget* budget);

// The highest count in `step_files` (DDPRUN_STEP_FILE contents); -1 when
// none holds one.
int64_t MaxStepCount(const std::vector<std::string>& step_files);

}  // namespace ddprun::agent
