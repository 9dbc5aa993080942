// Kill-and-resume tests of Checkpointer with real ranks (rank_helper train).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun_catch.h"
#include "tests/common/remove_at_exit.h"

#include "ddprun/worker/errors.h"
#include "tests/worker/rank_process.h"

namespace wt = ddprun::worker::testing;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/ddprun_ckpt_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return ddprun::testing::RemoveAtExit(tmpl);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Highest "step N" line in the rank-0 log (0 if none).
int LastLoggedStep(const std::string& log) {
  std::istringstream in(ReadText(log));
  std::string word;
  int step = 0, last = 0;
  while (in >> word >> step) last = std::max(last, step);
  return last;
}

int ResumedStep(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m,
                            std::regex("rank 0 resumed from step (\\d+)")));
  return std::stoi(m[1]);
}

struct Job {
  std::vector<std::unique_ptr<wt::RankProcess>> ranks;
};

Job Start(const std::vector<std::string>& args, int world,
          std::map<std::string, std::string> extra = {}) {
  Job job;
  int port = wt::FreeLoopbackPort();
  for (int r = 0; r < world; ++r) {
    auto env = wt::RankEnv(r, world, port);
    for (auto& [k, v] : extra) env[k] = v;
    job.ranks.push_back(std::make_unique<wt::RankProcess>(args, env));
  }
  return job;
}

// Waits for rank 0 and then stops the rest, as an agent would.
int Finish(Job& job, std::chrono::seconds timeout) {
  bool done = job.ranks[0]->Wait(timeout);
  if (!done) job.ranks[0]->Kill();
  job.ranks[0]->Wait(std::chrono::seconds(5));
  for (size_t i = 1; i < job.ranks.size(); ++i) {
    if (!job.ranks[i]->Wait(std::chrono::seconds(done ? 20 : 0))) {
      job.ranks[i]->Kill();
      job.ranks[i]->Wait(std::chrono::seconds(5));
    }
  }
  return job.ranks[0]->exit_code();
}

void RunKillResume(bool sharded) {
  const int kTotal = 40, kEvery = 5;
  const std::string helper = wt::BinPath("worker_rank_helper");
  std::string ref = TempDir(), dir = TempDir();
  std::string mode = sharded ? "sharded" : "plain";
  auto args = [&](const std::string& d) {
    return std::vector<std::string>{
        helper,     "train", d, std::to_string(kTotal), std::to_string(kEvery),
        d + "/log", mode};
  };
  // Uninterrupted reference.
  {
    Job job = Start(args(ref), 2);
    INFO(job.ranks[0]->Output());
    REQUIRE(Finish(job, std::chrono::seconds(60)) == 0);
  }
  // 1. Crash of rank 0 between fsync and rename of checkpoint 10.
  {
    Job job = Start(args(dir), 2, {{"CRASH_AT_SAVE_STEP", "10"}});
    REQUIRE(Finish(job, std::chrono::seconds(60)) == 128 + 9);
    REQUIRE(LastLoggedStep(dir + "/log") == 10);
    // The survivor sees its peer vanish: a restartable collective failure.
    INFO(job.ranks[1]->Output());
    REQUIRE(job.ranks[1]->exit_code() == ddprun::worker::kExitCollective);
    REQUIRE(job.ranks[1]->Output().find("CollectiveError") !=
            std::string::npos);
  }
  // 2. Resume (must be 5: the torn 10 is never loaded), then SIGKILL both
  // ranks at random moments, including in the middle of writes.
  std::mt19937 rng(std::random_device{}());
  int expected_floor = 5;
  for (int round = 0; round < 3; ++round) {
    int before = LastLoggedStep(dir + "/log");
    Job job = Start(args(dir), 2, {{"SLOW_MS", "15"}});
    // Kill only once the ranks have resumed (start-up time varies with the
    // machine's load), then at a random moment of training: with SLOW_MS 15
    // a step takes ~15 ms, so 0-300 ms covers several steps and saves.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (job.ranks[0]->Output().find("resumed from step") ==
               std::string::npos &&
           !job.ranks[0]->Wait(std::chrono::milliseconds(20)) &&
           std::chrono::steady_clock::now() < deadline) {
    }
    std::uniform_int_distribution<int> delay_ms(0, 300);
    // A random moment on purpose: the kill lands anywhere in a save.
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    for (auto& r : job.ranks) r->Kill();
    for (auto& r : job.ranks) r->Wait(std::chrono::seconds(5));
    std::string out = job.ranks[0]->Output();
    INFO("round " << round << " output:\n" << out);
    int resumed = ResumedStep(out);
    // At most one checkpoint interval is lost.
    REQUIRE(resumed % kEvery == 0);
    REQUIRE(resumed >= before - kEvery);
    REQUIRE(resumed >= expected_floor - kEvery);
    if (round == 0) REQUIRE(resumed == 5);
    expected_floor = std::max(expected_floor, resumed);
  }
  // 3. Run to completion: the result equals the uninterrupted run.
  {
    Job job = Start(args(dir), 2);
    std::string out;
    REQUIRE(Finish(job, std::chrono::seconds(60)) == 0);
    REQUIRE(ReadText(dir + "/final.bin") == ReadText(ref + "/final.bin"));
  }
  // 4. A corrupt newest file (torn copy, bad disk) is skipped.
  {
    std::string newest =
        dir + "/ckpt-" + std::string(10, '0') + std::to_string(kTotal) + ".pt";
    REQUIRE(::truncate(newest.c_str(), 1000) == 0);
    Job job = Start(args(dir), 2);
    REQUIRE(Finish(job, std::chrono::seconds(60)) == 0);
    REQUIRE(ResumedStep(job.ranks[0]->Output()) == kTotal - kEvery);
    REQUIRE(ReadText(dir + "/final.bin") == ReadText(ref + "/final.bin"));
  }
}

}  // namespace

TEST_CASE("Checkpointer: kill at random points, resume loses <= 1 interval",
          "[worker][process][checkpoint]") {
  RunKillResume(/*sharded=*/false);
}

TEST_CASE("Checkpointer: sharded optimizer state survives kill and resume",
          "[worker][process][checkpoint]") {
  RunKillResume(/*sharded=*/true);
}
