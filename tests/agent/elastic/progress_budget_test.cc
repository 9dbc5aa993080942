// --max_restarts_without_progress: when restarts stop being worth it.

#include "ddprun_catch.h"

#include <stdlib.h>

#include <fstream>
#include <string>

#include "agent/elastic/progress_budget.h"

namespace ddprun::agent {
namespace {

TEST_CASE("ProgressBudget: N restarts in a row without a step stop the job",
          "[agent][progress]") {
  ProgressBudget budget(2);
  // The first attempt trained (steps counted), then failed: restart.
  CHECK_FALSE(budget.OnFailedAttempt(/*restart=*/false, 120));
  // Restart 1 crashed before any step: one without progress.
  CHECK_FALSE(budget.OnFailedAttempt(true, -1));
  CHECK(budget.streak() == 1);
  // Restart 2 counted a step file but no step past 0: still none.
  CHECK(budget.OnFailedAttempt(true, 0));
  CHECK(budget.streak() == 2);
}

TEST_CASE("ProgressBudget: a restart that steps ends the streak",
          "[agent][progress]") {
  ProgressBudget budget(2);
  CHECK_FALSE(budget.OnFailedAttempt(false, 10));
  CHECK_FALSE(budget.OnFailedAttempt(true, -1));
  CHECK_FALSE(budget.OnFailedAttempt(true, 3));  // progress again
  CHECK(budget.streak() == 0);
  CHECK_FALSE(budget.OnFailedAttempt(true, -1));
  CHECK(budget.OnFailedAttempt(true, -1));
}

TEST_CASE("ProgressBudget: off, and unknown until a rank counts",
          "[agent][progress]") {
  ProgressBudget off(0);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(off.OnFailedAttempt(true, -1));
  // Workers that never count steps: progress is unknown, never stopped.
  ProgressBudget silent(1);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(silent.OnFailedAttempt(i > 0, -1));
  CHECK(silent.streak() == 0);
}

TEST_CASE("MaxStepCount: the highest count of the step files",
          "[agent][progress]") {
  char tmpl[] = "/tmp/ddprun_steps_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/a") << "12\n";
  std::ofstream(dir + "/b") << "40\n";
  std::ofstream(dir + "/c") << "junk\n";
  CHECK(MaxStepCount({dir + "/a", dir + "/b", dir + "/c", dir + "/none"}) ==
        40);
  CHECK(MaxStepCount({dir + "/c", dir + "/none"}) == -1);
  CHECK(MaxStepCount({}) == -1);
  (void)!system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace ddprun::agent
