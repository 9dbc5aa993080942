#include "agent/elastic/progress_budget.h"

#include <algorithm>

#include "agent/watch/step_file.h"

namespace ddprun::agent {

bool ProgressBudget::OnFailedAttempt(bool restart, int64_t steps) {
  if (limit_ <= 0) return false;
  if (steps > 0) {
    counted_ = true;
    streak_ = 0;
    return false;
  }
  if (!counted_ || !restart) return false;
  ++streak_;
  return streak_ >= limit_;
}

std::string NotRetriedReason(int root_local_rank, int root_exitcode,
                             int attempt, bool retry_usage_errors,
                             const std::vector<std::string>& step_files,
                             ProgressBudget* budget) {
  constexpr int kUsageErrorExitCode = 2;
  if (root_exitcode == kUsageErrorExitCode && attempt == 1 &&
      !retry_usage_errors) {
    return "not retried: local_rank " + std::to_string(root_local_rank) +
           " exited with code 2 on the first attempt, a usage or "
           "configuration error that a restart cannot fix "
           "(--retry_usage_errors retries it)";
  }
  if (budget->OnFailedAttempt(attempt > 1, MaxStepCount(step_files))) {
    return "not restarted: " + std::to_string(budget->streak()) +
           " restarts in a row made no progress (no rank advanced its step "
           "counter; --max_restarts_without_progress=" +
           std::to_string(budget->limit()) + ")";
  }
  return "";
}

int64_t MaxStepCount(const std::vector<std::string>& step_files) {
  int64_t best = -1;
  for (const std::string& path : step_files) {
    best = std::max<int64_t>(best, ReadStepFile(path).steps);
  }
  return best;
}

}  // namespace ddprun::agent
