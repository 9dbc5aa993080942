#include "agent/elastic/progress_budget.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

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
    std::ifstream in(path);
    std::string text;
    if (!in || !std::getline(in, text) || text.empty()) continue;
    char* end = nullptr;
    const long long n = std::strtoll(text.c_str(), &end, 10);
    if (end != text.c_str() && n >= 0) best = std::max<int64_t>(best, n);
  }
  return best;
}

}  // namespace ddprun::agent
