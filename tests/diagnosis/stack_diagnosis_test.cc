// The hang diagnosis (diagnosis/stack_diagnosis.*) on fixture dumps in
// tests/diagnosis/data/stacks/, written as Python 3.11's faulthandler writes
// them (one of them as ddprun's stacks.txt holds it, with our header).

#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

namespace ddprun::diagnosis {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(DDPRUN_SOURCE_DIR "/tests/diagnosis/data/stacks/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RankStacks Rank(int rank, int pid, const std::string& fixture) {
  RankStacks r;
  r.rank = rank;
  r.pid = pid;
  r.threads = ParseFaulthandlerDump(Fixture(fixture));
  return r;
}

TEST_CASE("ParseFaulthandlerDump: threads, frames, the current thread",
          "[diagnosis][stacks]") {
  std::vector<ThreadStack> t =
      ParseFaulthandlerDump(Fixture("sleeping_in_loader.txt"));
  REQUIRE(t.size() == 2);
  CHECK_FALSE(t[0].current);
  CHECK(t[0].thread_id == "0x00007f2f2ec736c0");
  CHECK(t[0].frames.size() == 5);
  CHECK(t[1].current);
  REQUIRE(t[1].frames.size() == 4);
  CHECK(t[1].frames[0].file == "/home/u/job/data.py");
  CHECK(t[1].frames[0].line == 88);
  CHECK(t[1].frames[0].function == "load");
  CHECK(t[1].frames[3].function == "<module>");
  // Unknown lines are skipped; a path with a quote in it is kept whole.
  t = ParseFaulthandlerDump(
      "garbage\n  File \"x\", line 1 in f\nStack (most recent call first):\n"
      "  File \"/a \\\"b\\\".py\", line 7 in g\n  <no Python frame>\n");
  REQUIRE(t.size() == 1);
  REQUIRE(t[0].frames.size() == 1);
  CHECK(t[0].frames[0].file == "/a \\\"b\\\".py");
  CHECK(t[0].frames[0].line == 7);
  CHECK(ParseFaulthandlerDump("").empty());
}

TEST_CASE("IsLibraryFrame: the standard library, packages, frozen code",
          "[diagnosis][stacks]") {
  CHECK(IsLibraryFrame({"/usr/lib/python3.11/threading.py", 1, "wait"}));
  CHECK(IsLibraryFrame(
      {"/root/.pyenv/versions/3.11.7/lib/python3.11/q.py", 1, "get"}));
  CHECK(IsLibraryFrame(
      {"/usr/lib/python3/dist-packages/torch/distributed/x.py", 1, "f"}));
  CHECK(IsLibraryFrame({"/venv/lib/python3.11/site-packages/x.py", 1, "f"}));
  CHECK(IsLibraryFrame({"<frozen runpy>", 1, "_run_code"}));
  CHECK_FALSE(IsLibraryFrame({"/home/u/job/train.py", 1, "main"}));
  CHECK_FALSE(IsLibraryFrame({"/home/u/lib/pythonic/x.py", 1, "main"}));
}

TEST_CASE("PositionOf: the innermost user frame and what it called",
          "[diagnosis][stacks]") {
  RankPosition p = PositionOf(Rank(0, 1, "waiting_all_reduce.txt").threads);
  REQUIRE(p.known);
  CHECK(p.user.line == 102);
  CHECK(p.user.function == "train_step");
  CHECK(p.callee == "all_reduce");
  CHECK(p.in_collective);
  // torch 2.x's wrapper is looked through; the main thread is found by its
  // <module> frame although another thread took the signal.
  p = PositionOf(Rank(0, 1, "waiting_torch2_wrapper.txt").threads);
  CHECK(p.user.line == 102);
  CHECK(p.callee == "all_reduce");
  CHECK(p.in_collective);
  p = PositionOf(Rank(0, 1, "sleeping_in_loader.txt").threads);
  CHECK(p.user.file == "/home/u/job/data.py");
  CHECK(p.user.line == 88);
  CHECK(p.callee.empty());
  CHECK_FALSE(p.in_collective);
  p = PositionOf(Rank(0, 1, "waiting_for_loader_thread.txt").threads);
  CHECK(p.user.line == 70);
  CHECK(p.callee == "get");
  CHECK_FALSE(PositionOf(std::vector<ThreadStack>{}).known);
  CHECK_FALSE(PositionOf(NativeDump{}).known);
}

TEST_CASE("DiagnoseHang: names the rank that is not where the others wait",
          "[diagnosis][stacks]") {
  std::vector<RankStacks> ranks = {Rank(0, 811, "waiting_all_reduce.txt"),
                                   Rank(1, 812, "sleeping_in_loader.txt"),
                                   Rank(2, 813, "waiting_torch2_wrapper.txt"),
                                   Rank(3, 814, "waiting_all_reduce.txt")};
  CHECK(DiagnoseHang(ranks) ==
        "rank 1 (pid 812) is in data.py:88 in load while ranks 0,2,3 wait in "
        "all_reduce (train.py:102 in train_step)");
}

TEST_CASE("DiagnoseHang: on a 1:1 tie the rank in a collective waits",
          "[diagnosis][stacks]") {
  std::vector<RankStacks> ranks = {Rank(0, 10, "sleeping_in_loader.txt"),
                                   Rank(1, 11, "waiting_all_reduce.txt")};
  CHECK(DiagnoseHang(ranks) ==
        "rank 0 (pid 10) is in data.py:88 in load while rank 1 waits in "
        "all_reduce (train.py:102 in train_step)");
}

TEST_CASE("DiagnoseHang: ranks without a stack, several odd groups, ranges",
          "[diagnosis][stacks]") {
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back(Rank(r, 100 + r, "waiting_all_reduce.txt"));
  }
  ranks[5] = Rank(5, 105, "sleeping_in_loader.txt");
  ranks[6].threads.clear();
  ranks[6].missing = "did not answer within 2.0 s";
  ranks[7] = Rank(7, 107, "waiting_for_loader_thread.txt");
  CHECK(DiagnoseHang(ranks) ==
        "rank 5 (pid 105) is in data.py:88 in load, rank 7 (pid 107) waits "
        "in get (data.py:70 in __next__) and rank 6 (pid 106) gave no stack "
        "(did not answer within 2.0 s) while ranks 0-4 wait in all_reduce "
        "(train.py:102 in train_step)");
}

TEST_CASE("DiagnoseHang: every rank in the same place", "[diagnosis][stacks]") {
  std::vector<RankStacks> ranks = {Rank(0, 1, "waiting_all_reduce.txt"),
                                   Rank(1, 2, "waiting_all_reduce.txt")};
  CHECK(DiagnoseHang(ranks) ==
        "all 2 ranks (0,1) wait in all_reduce (train.py:102 in train_step); "
        "no rank stands apart (a hang would be inside that call, or on "
        "another node)");
  CHECK(DiagnoseHang({}).empty());
}

TEST_CASE("FormatRankList and OneLineStack", "[diagnosis][stacks]") {
  CHECK(FormatRankList({7, 6, 0, 1, 2, 3, 4}) == "0-4,6,7");
  CHECK(FormatRankList({3}) == "3");
  CHECK(FormatRankList({0, 1, 1}) == "0,1");
  ThreadStack t = Rank(0, 1, "waiting_all_reduce.txt").threads[0];
  CHECK(OneLineStack(t, 2) ==
        "distributed_c10d.py:1436 in all_reduce <- train.py:102 in "
        "train_step <- ...");
  CHECK(OneLineStack(ThreadStack{}, 3) == "<no Python frame>");
}

}  // namespace
}  // namespace ddprun::diagnosis

namespace ddprun::diagnosis {
namespace {

TEST_CASE("ParseNativeDump and DiagnoseHang: C++ workers' collective and step",
          "[diagnosis][stacks]") {
  NativeDump d = ParseNativeDump(Fixture("native_all_reduce.txt"));
  CHECK(d.present);
  CHECK(d.activity == "all_reduce");
  CHECK(d.step == 12);
  CHECK(d.threads == 2);
  d = ParseNativeDump(Fixture("native_no_collective.txt"));
  CHECK(d.activity.empty());
  CHECK(d.step == 11);
  CHECK(d.threads == 2);
  CHECK_FALSE(ParseNativeDump(Fixture("waiting_all_reduce.txt")).present);
  std::vector<RankStacks> ranks(3);
  for (int r = 0; r < 3; ++r) {
    ranks[r].rank = r;
    ranks[r].pid = 900 + r;
    ranks[r].native = ParseNativeDump(
        Fixture(r == 1 ? "native_no_collective.txt" : "native_all_reduce.txt"));
  }
  CHECK(DiagnoseHang(ranks) ==
        "rank 1 (pid 901) is in no collective (step 11) while ranks 0,2 wait "
        "in all_reduce (step 12)");
}

}  // namespace
}  // namespace ddprun::diagnosis

namespace ddprun::diagnosis {
namespace {

TEST_CASE("Summarize and FromSummary: what nodes exchange keeps the verdict",
          "[diagnosis][stacks]") {
  // Ranks 0-3 on two nodes; rank 3 (node 1) sleeps in the data loader.
  std::vector<RankStacks> local = {Rank(0, 800, "waiting_all_reduce.txt"),
                                   Rank(1, 801, "waiting_torch2_wrapper.txt"),
                                   Rank(2, 802, "waiting_all_reduce.txt"),
                                   Rank(3, 803, "sleeping_in_loader.txt")};
  std::vector<RankStacks> across;
  for (const RankStacks& r : local) {
    diagnosis::StackSummary s = Summarize(r, r.rank / 2, "host-x");
    CHECK(s.group_rank == r.rank / 2);
    CHECK(s.missing.empty());
    CHECK(s.stack.rfind("Current thread ", 0) == 0);
    across.push_back(FromSummary(s));
  }
  CHECK(across[3].node == "node 1: host-x");
  // Only the main thread travels, with the frames that place the rank.
  CHECK(across[3].threads.size() == 1);
  CHECK(PositionOf(across[3].threads).user.line ==
        PositionOf(local[3].threads).user.line);
  CHECK(DiagnoseHang(across) ==
        "rank 3 (node 1: host-x, pid 803) is in data.py:88 in load while "
        "ranks 0-2 wait in all_reduce (train.py:102 in train_step)");
  CHECK(ConsoleLine(across[3], 2) ==
        "  rank 3 (node 1: host-x, pid 803): data.py:88 in load <- "
        "train.py:101 in train_step <- ...\n");
}

TEST_CASE("Summarize: deep stacks are cut, native and missing ranks travel",
          "[diagnosis][stacks]") {
  RankStacks deep;
  deep.rank = 4;
  deep.pid = 9;
  ThreadStack t;
  t.current = true;
  for (int i = 0; i < 100; ++i) {
    t.frames.push_back({"/job/rec.py", i + 1, "f" + std::to_string(i)});
  }
  deep.threads.push_back(t);
  RankStacks back = FromSummary(Summarize(deep, 0, "h"));
  REQUIRE(back.threads.size() == 1);
  // The innermost frame is user code: it and kSummaryFramesPast more.
  CHECK(back.threads[0].frames.size() == 1 + kSummaryFramesPast);
  CHECK(back.threads[0].frames[0].function == "f0");

  RankStacks native;
  native.rank = 1;
  native.pid = 7;
  native.native = ParseNativeDump(Fixture("native_all_reduce.txt"));
  RankStacks n = FromSummary(Summarize(native, 1, "h"));
  CHECK(n.native.present);
  CHECK(n.native.activity == "all_reduce");
  CHECK(n.native.step == 12);
  CHECK(n.native.threads == 2);

  RankStacks gone;
  gone.rank = 2;
  gone.pid = 8;
  gone.missing = "did not answer within 2.0 s";
  RankStacks g = FromSummary(Summarize(gone, 1, "h"));
  CHECK(g.missing == "did not answer within 2.0 s");
  CHECK(ConsoleLine(g, 3) ==
        "  rank 2 (node 1: h, pid 8): no stack: did not "
        "answer within 2.0 s\n");
}

}  // namespace
}  // namespace ddprun::diagnosis
