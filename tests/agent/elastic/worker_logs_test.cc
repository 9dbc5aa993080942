// WorkerLogs: an attempt's folder in torchrun's layout, each rank's streams
// (redirect, tee, console filter, line prefix) and the filtered logs.
#include "ddprun_catch.h"

#include <fstream>
#include <string>

#include "agent/elastic/worker_logs.h"
#include "tests/agent/agent_fakes.h"
#include "tests/support/process.h"

namespace ddprun::agent {
namespace {

using ddprun::testing::FileExists;
using ddprun::testing::ReadFile;
using ddprun::testing::TempDir;
using testing::CaptureConsole;

TEST_CASE(
    "WorkerLogs: -r/-t per rank, the console filter and the duplicate "
    "filters, in attempt_<n>/<local_rank>/",
    "[agent][logs]") {
  TempDir tmp;
  const std::string run = tmp.path();
  LaunchOptions o;
  o.role = "trainer";
  o.nproc_per_node = 2;
  o.redirects.is_map = true;                       // -r 0:1 -t 1:3
  o.redirects.per_rank = {{0, StdStreams::kOut}};  // rank 0's stdout: file
  o.tee.is_map = true;
  o.tee.per_rank = {{1, StdStreams::kAll}};  // rank 1: file + console
  o.local_ranks_filter = std::set<int>{1};
  o.duplicate_stdout_filters = {"loss"};
  CaptureConsole console;
  WorkerLogs logs(&o, run, &console);
  REQUIRE(logs.files());
  REQUIRE(logs.StartAttempt(3).ok());
  auto r0 = logs.OpenRank(0, 4, 2);
  auto r1 = logs.OpenRank(1, 5, 2);
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  CHECK(r0->dir == run + "/attempt_3/0");
  CHECK(r1->dir == run + "/attempt_3/1");
  r0->out->OnChunk("rank0 loss 1\n");
  r0->err->OnChunk("rank0 err\n");
  r1->out->OnChunk("rank1 loss 2\nrank1 other\n");
  for (auto* r : {&*r0, &*r1}) {
    r->out->OnEof();
    r->err->OnEof();
  }
  // Rank 0 is filtered off the console; its stdout went to its file only.
  CHECK(ReadFile(r0->dir + "/stdout.log") == "rank0 loss 1\n");
  CHECK_FALSE(FileExists(r0->dir + "/stderr.log"));
  CHECK(console.out == "[trainer1]:rank1 loss 2\n[trainer1]:rank1 other\n");
  CHECK(console.err.empty());
  CHECK(ReadFile(r1->dir + "/stdout.log") == "rank1 loss 2\nrank1 other\n");
  // Only the shown rank's tee'd lines with a filter's text.
  CHECK(ReadFile(run + "/attempt_3/filtered_stdout.log") ==
        "[trainer1]:rank1 loss 2\n");
  CHECK_FALSE(FileExists(run + "/attempt_3/filtered_stderr.log"));

  // A scaling event keeps the attempt number: its folder starts empty.
  REQUIRE(logs.StartAttempt(3).ok());
  CHECK_FALSE(FileExists(run + "/attempt_3/0"));
}

TEST_CASE(
    "WorkerLogs: without a run log folder (--log_dir /dev/null) every stream "
    "goes to the console and nothing is written",
    "[agent][logs]") {
  LaunchOptions o;
  o.nproc_per_node = 1;
  o.redirects.all = StdStreams::kAll;  // ignored without files, as torchrun
  o.log_line_prefix_template = "[${role_name}:${rank}@${node_rank}]";
  o.role = "w";
  CaptureConsole console;
  WorkerLogs logs(&o, "", &console);
  CHECK_FALSE(logs.files());
  REQUIRE(logs.StartAttempt(0).ok());
  auto r = logs.OpenRank(0, 7, 3);
  REQUIRE(r.ok());
  CHECK(r->dir.empty());
  r->out->OnChunk("hello\n");
  r->err->OnChunk("oops\n");
  r->out->OnEof();
  r->err->OnEof();
  CHECK(console.out == "[w:7@3]hello\n");
  CHECK(console.err == "[w:7@3]oops\n");
}

TEST_CASE("WorkerLogs: a folder that cannot be made is an error naming it",
          "[agent][logs]") {
  TempDir tmp;
  // A file where the run's folder should be.
  const std::string blocker = tmp.path() + "/file";
  std::ofstream(blocker) << "x";
  LaunchOptions o;
  o.nproc_per_node = 1;
  CaptureConsole console;
  WorkerLogs logs(&o, blocker, &console);
  Status s = logs.StartAttempt(0);
  CHECK_FALSE(s.ok());
  CHECK(s.message().find(blocker) != std::string::npos);
}

}  // namespace
}  // namespace ddprun::agent
