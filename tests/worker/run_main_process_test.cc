// Multi-process tests of RunMain (run_main.h): torchrun's error file and the
// exit codes. Real ranks (rank_helper) on loopback with Gloo through a real
// TCPStore.

#include <string>

#include "ddprun_catch.h"

#include "ddprun/worker/errors.h"
#include "tests/worker/process_checks.h"
#include "tests/worker/rank_process.h"

namespace ddprun::worker::testing {
namespace {

TEST_CASE("RunMain: an exception writes torchrun's error file and exits 1",
          "[worker][process][error]") {
  std::string dir = TempDir();
  std::string file = dir + "/error.json";
  wt::RankProcess p(
      {Helper(), "throw", "runtime"},
      {{"TORCHELASTIC_ERROR_FILE", file}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  REQUIRE(p.Wait(std::chrono::seconds(30)));
  REQUIRE(p.exit_code() == 1);
  std::string json = ReadText(file);
  INFO(json);
  REQUIRE(json.rfind("{\"message\": {\"message\": \"std::runtime_error: loss "
                     "is NaN at step 7\", \"extraInfo\": {\"py_callstack\": \"",
                     0) == 0);
  REQUIRE(json.find("\"timestamp\": \"") != std::string::npos);
  // Python must parse it with the exact schema torchrun reads.
  std::string check =
      "/usr/bin/python3 -c \"import json,sys,time; d=json.load(open('" + file +
      "')); m=d['message']; assert m['message'].startswith('std::runtime_error"
      "'); assert abs(int(m['extraInfo']['timestamp'])-time.time())<120; "
      "assert 'rank 0' in m['extraInfo']['py_callstack']\"";
  REQUIRE(std::system(check.c_str()) == 0);
}

TEST_CASE("RunMain: collective failures and Torch errors get their codes",
          "[worker][process][error]") {
  std::string dir = TempDir();
  std::string file = dir + "/error.json";
  {
    wt::RankProcess p({Helper(), "throw", "collective"},
                      {{"TORCHELASTIC_ERROR_FILE", file}});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    REQUIRE(p.exit_code() == kExitCollective);
    REQUIRE(ReadText(file).find("CollectiveError: all_reduce failed") !=
            std::string::npos);
  }
  {
    wt::RankProcess p({Helper(), "throw", "torch"},
                      {{"TORCHELASTIC_ERROR_FILE", file}});
    REQUIRE(p.Wait(std::chrono::seconds(30)));
    REQUIRE(p.exit_code() == 1);
    std::string json = ReadText(file);
    INFO(json);
    REQUIRE(json.find("c10::Error: ") != std::string::npos);
  }
}

}  // namespace
}  // namespace ddprun::worker::testing
