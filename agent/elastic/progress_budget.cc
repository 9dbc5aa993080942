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

int64_t MaxStepCount(const std::vector<std::string>& step_files) {
  int64_t best = -1;
  for (const std::string& path : step_files) {
    best = std::max<int64_t>(best, ReadStepFile(path).steps);
  }
  return best;
}

}  // namespace ddprun::agent
