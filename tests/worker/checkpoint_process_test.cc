// Checkpointer: kill-and-resume with real ranks (rank_helper train), the
// memory a resume takes (rank_helper ckpt_memory), and, in this process
// (a standalone World, metadata-only checkpoints), the rotation and the
// files in a reused or shared folder. No Torch header here: checkpoint.h
// needs only c10's Device.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun_catch.h"
#include "tests/common/remove_at_exit.h"

#include "common/file_util.h"
#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/errors.h"
#include "tests/worker/rank_process.h"

namespace w = ddprun::worker;
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

// The steps of the complete checkpoints in `dir`, in ListComplete's order.
std::vector<int64_t> Steps(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const std::string& path : w::Checkpointer::ListComplete(dir)) {
    // .../ckpt-000000000042.pt
    steps.push_back(std::stoll(path.substr(path.rfind('/') + 6, 12)));
  }
  return steps;
}

std::string FileName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%012lld.pt",
                static_cast<long long>(step));
  return name;
}

// checkpoint.h's trailer, written here from its description.
std::string Trailer(const std::string& payload, uint64_t generation) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : payload) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  const uint64_t length = payload.size();
  std::string t = "DDPCKPT1";
  t.append(reinterpret_cast<const char*>(&length), 8);
  t.append(reinterpret_cast<const char*>(&hash), 8);
  t.append(reinterpret_cast<const char*>(&generation), 8);
  return t;
}

// Metadata only: no model, no optimizer, no RNG (no Torch needed here).
w::CheckpointParts NoParts() {
  w::CheckpointParts parts;
  parts.rng = false;
  return parts;
}

w::TrainState AtStep(int64_t step) {
  w::TrainState s;
  s.step = step;
  s.epoch = step / 100;
  return s;
}

// Bytes this process has read so far (/proc/self/io rchar).
uint64_t BytesRead() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
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

TEST_CASE(
    "Checkpointer: a job whose gradients go over the process group (ranks on "
    "several hosts) resumes bit for bit",
    "[worker][process][checkpoint]") {
  // Gloo's ring sums each position of a bucket starting at another rank, so
  // with 3+ ranks the rounding depends on where a gradient lies in its
  // bucket. A fresh DDP's first step buckets the gradients in parameter
  // order, and from its second step in the order backward produced them:
  // the first step after a resume must use the saving run's buckets.
  // (Ranks sharing a host sum in shared memory in rank order: no such
  // dependence; DDPRUN_SHM_ALLREDUCE=0 stands for several hosts.)
  const int kTotal = 12, kEvery = 4, kRanks = 4;
  const std::string helper = wt::BinPath("worker_rank_helper");
  const std::string ref = TempDir(), dir = TempDir();
  auto args = [&](const std::string& d, int total) {
    return std::vector<std::string>{
        helper,     "train", d, std::to_string(total), std::to_string(kEvery),
        d + "/log", "plain"};
  };
  const std::map<std::string, std::string> env = {{"DDPRUN_SHM_ALLREDUCE", "0"},
                                                  {"OMP_NUM_THREADS", "1"}};
  {
    Job job = Start(args(ref, kTotal), kRanks, env);
    INFO(job.ranks[0]->Output());
    REQUIRE(Finish(job, std::chrono::seconds(120)) == 0);
  }
  {
    // Stops after step 6: the newest checkpoint is step 4's.
    Job job = Start(args(dir, 6), kRanks, env);
    INFO(job.ranks[0]->Output());
    REQUIRE(Finish(job, std::chrono::seconds(120)) == 0);
  }
  Job job = Start(args(dir, kTotal), kRanks, env);
  INFO(job.ranks[0]->Output());
  REQUIRE(Finish(job, std::chrono::seconds(120)) == 0);
  CHECK(ResumedStep(job.ranks[0]->Output()) == kEvery);
  CHECK(ReadText(dir + "/final.bin") == ReadText(ref + "/final.bin"));
}

TEST_CASE(
    "Checkpointer: resuming holds the checkpoint's tensors once, not a copy "
    "of the file",
    "[worker][process][checkpoint]") {
  // A 64 MiB model: saved by one process, loaded by a fresh one, which
  // reports how far the load raised its peak resident size.
  const std::string dir = TempDir();
  const std::string helper = wt::BinPath("worker_rank_helper");
  const std::vector<std::string> save = {helper, "ckpt_memory", dir, "save",
                                         "4096"};
  wt::RankProcess saver(save, {{"OMP_NUM_THREADS", "1"}});
  REQUIRE(saver.Wait(std::chrono::seconds(120)));
  INFO(saver.Output());
  REQUIRE(saver.exit_code() == 0);
  wt::RankProcess loader({helper, "ckpt_memory", dir, "load", "4096"},
                         {{"OMP_NUM_THREADS", "1"}});
  REQUIRE(loader.Wait(std::chrono::seconds(120)));
  const std::string out = loader.Output();
  INFO(out);
  REQUIRE(loader.exit_code() == 0);
  std::smatch m;
  REQUIRE(std::regex_search(
      out, m, std::regex("load_peak_kib (-?\\d+) file_kib (\\d+)")));
  const double peak = std::stod(m[1]), file = std::stod(m[2]);
  // The tensors themselves (1x) and buffers; the file read whole into
  // memory, then parsed, cost 2-3x.
  CHECK(file > 60 * 1024);
  CHECK(peak / file < 1.3);
}

TEST_CASE(
    "Checkpointer: a run writing lower steps into a folder holding higher "
    "ones keeps its own checkpoints and resumes from them",
    "[worker][checkpoint]") {
  const std::string dir = TempDir();
  w::World world;
  {
    w::Checkpointer earlier(world, {dir, 100, /*keep_last=*/2});
    earlier.Save(AtStep(500), NoParts());
    earlier.Save(AtStep(1000), NoParts());
  }
  // A new run in the same output folder, from step 0 (it did not resume).
  w::Checkpointer run(world, {dir, 10, /*keep_last=*/2});
  const std::string first = run.Save(AtStep(10), NoParts());
  // The rotation kept the highest steps and deleted the file just written.
  CHECK(w::Checkpointer::IsComplete(first));
  CHECK(Steps(dir) == std::vector<int64_t>{1000, 10});
  // A restart now resumes from this run's step 10, not the other's 1000.
  std::optional<w::TrainState> resumed = run.LoadLatest(NoParts());
  REQUIRE(resumed.has_value());
  CHECK(resumed->step == 10);
  run.Save(AtStep(20), NoParts());
  CHECK(Steps(dir) == std::vector<int64_t>{10, 20});  // the last two written
  CHECK(run.LoadLatest(NoParts())->step == 20);
  // keep_last 1: the file just written is the one kept.
  w::Checkpointer one(world, {dir, 10, /*keep_last=*/1});
  const std::string kept = one.Save(AtStep(5), NoParts());
  CHECK(w::Checkpointer::IsComplete(kept));
  CHECK(Steps(dir) == std::vector<int64_t>{5});
}

TEST_CASE(
    "Checkpointer: saving reads the trailers of the files it keeps, "
    "not the files",
    "[worker][checkpoint]") {
  const std::string dir = TempDir();
  w::World world;
  // Two complete checkpoints of 32 MiB each, as a larger model's would be.
  std::string payload(size_t{32} << 20, '\0');
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < payload.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&payload[i], &v, 8);
  }
  const std::string trailer = Trailer(payload, 0);
  for (int64_t step : {1, 2}) {
    REQUIRE(ddprun::WriteFileAtomically(dir + "/" + FileName(step), {payload, trailer})
                .ok());
  }
  w::Checkpointer run(world, {dir, 1, /*keep_last=*/3});
  const uint64_t before = BytesRead();
  run.Save(AtStep(3), NoParts());
  const uint64_t read = BytesRead() - before;
  INFO("Save read " << read << " bytes");
  CHECK(read < (uint64_t{1} << 20));
  CHECK(Steps(dir) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE(
    "Checkpointer: a symlink planted at the temporary name is not written "
    "through, and another job's write in flight survives the rotation",
    "[worker][checkpoint]") {
  const std::string dir = TempDir();
  const std::string outside = TempDir();
  w::World world;
  w::Checkpointer run(world, {dir, 5, /*keep_last=*/2});
  const std::string victim = outside + "/victim";
  std::ofstream(victim) << "precious";
  const std::string final_path = dir + "/" + FileName(5);
  const std::string planted = final_path + ".tmp." + std::to_string(::getpid());
  REQUIRE(::symlink(victim.c_str(), planted.c_str()) == 0);
  // A writer that crashed before its rename left its temporary file.
  const std::string crashed = dir + "/" + FileName(4) + ".tmp.99999";
  std::ofstream(crashed) << "torn";
  // Another job sharing the folder, between its fsync and its rename.
  std::promise<void> in_flight;
  std::promise<void> go_on;
  std::shared_future<void> go = go_on.get_future().share();
  ddprun::AtomicWriteOptions other;
  other.before_rename = [&](const std::string&) {
    in_flight.set_value();
    go.wait();
  };
  auto other_job = std::async(std::launch::async, [&] {
    return ddprun::WriteFileAtomically(dir + "/other_job_best.pt", {"theirs"}, other);
  });
  in_flight.get_future().wait();

  const std::string saved = run.Save(AtStep(5), NoParts());
  go_on.set_value();
  const ddprun::Status theirs = other_job.get();
  CHECK(theirs.ok());
  CHECK(ReadText(dir + "/other_job_best.pt") == "theirs");
  CHECK(ReadText(victim) == "precious");
  struct stat st {};
  REQUIRE(::lstat(saved.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(w::Checkpointer::IsComplete(saved));
  CHECK(::access(crashed.c_str(), F_OK) != 0);  // leftovers still go
}


TEST_CASE(
    "Checkpointer::LoadFile: a complete file whose payload torch cannot "
    "parse is a WorkerError naming the file",
    "[worker][checkpoint]") {
  // fuzz/checkpoint's input: a metadata-only checkpoint with one byte of
  // its TorchScript text changed, under a trailer that matches it (a
  // payload damaged before it was hashed). Torch's parser threw a
  // std::runtime_error, which no caller expected of a checkpoint.
  std::string payload = ReadText(std::string(DDPRUN_SOURCE_DIR) +
                                 "/tests/fuzz/corpus/checkpoint/"
                                 "torchscript_parse_error_escaped");
  REQUIRE(payload.size() > 32);
  payload.resize(payload.size() - 32);  // its stale trailer
  const std::string path = TempDir() + "/" + FileName(7);
  std::ofstream(path, std::ios::binary) << payload << Trailer(payload, 1);
  REQUIRE(w::Checkpointer::IsComplete(path));
  try {
    w::Checkpointer::LoadFile(path, NoParts());
    FAIL("a payload torch cannot parse loaded");
  } catch (const w::WorkerError& e) {
    CHECK_THAT(e.what(), Catch::Contains(path + " cannot be read"));
  }
}
