// Stack dumps whose lines end in several carriage returns (a dump passed
// through tools that add one each): found by the fuzz target
// (tests/fuzz/stack_diagnosis_fuzz_target.cc), whose summaries round trip
// lost the rank's position.
#include "ddprun_catch.h"

#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"

namespace ddprun::diagnosis {

TEST_CASE(
    "ParseFaulthandlerDump: every carriage return at a line's end goes, "
    "and the summary keeps the position",
    "[diagnosis]") {
  const char dump[] =
      "Current thread 0x00007f2f2f9d4b80 (most recent call first):\r\r\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/"
      "distributed_c10d.py\", line 1436 in all_reduce\r\r\n"
      "  File \"/home/u/job/train.py\", line 102 in train_step\r\r\n";
  RankStacks rank;
  rank.rank = 1;
  rank.pid = 812;
  rank.threads = ParseFaulthandlerDump(dump);
  REQUIRE(rank.threads.size() == 1);
  REQUIRE(rank.threads[0].frames.size() == 2);
  CHECK(rank.threads[0].frames[0].function == "all_reduce");
  CHECK(rank.threads[0].frames[1].function == "train_step");
  const RankPosition here = PositionOf(rank.threads);
  const RankPosition there =
      PositionOf(FromSummary(Summarize(rank, 0, "host-a")).threads);
  CHECK(there.user.function == here.user.function);
  CHECK(there.callee == here.callee);
  CHECK(there.callee == "all_reduce");
}

}  // namespace ddprun::diagnosis
