// Helpers of the worker's multi-process tests (tests/worker/*_process_test):
// the rank helper binary, scratch folders, the files ranks write.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include "tests/common/remove_at_exit.h"

#include "ddprun/worker/errors.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {

namespace wt = ddprun::worker::testing;
using ddprun::worker::kExitCollective;

inline std::string Helper() { return wt::BinPath("worker_rank_helper"); }

inline std::string TempDir() {
  char tmpl[] = "/tmp/ddprun_worker_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return ddprun::testing::RemoveAtExit(tmpl);
}

inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v;
  float f;
  while (in.read(reinterpret_cast<char*>(&f), sizeof(f))) v.push_back(f);
  return v;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void RequireAllOk(const std::vector<wt::RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << " output:\n" << results[r].output);
    REQUIRE(results[r].exit_code == 0);
  }
}

inline double MaxAbsDiff(const std::vector<float>& a,
                         const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

}  // namespace ddprun::worker::testing
