#include "tests/examples/trainer_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>

#include "tests/common/remove_at_exit.h"
namespace ddprun::examples::testing {

CommandResult RunCommand(const std::string& command, int timeout_s) {
  // One intra-op thread per process, as ddprun gives each worker: the test
  // machine has 2 cores shared with other tests, and 2 OpenMP threads per
  // trainer there run several times slower than 1.
  return ddprun::testing::RunShell(command, std::chrono::seconds(timeout_s),
                                   {{"OMP_NUM_THREADS", "1"}});
}

std::string FreshDir(const std::string& tag) {
  const std::string dir =
      "/tmp/ddprun_examples_test_" + std::to_string(::getpid()) + "_" + tag;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return ddprun::testing::RemoveAtExit(dir);
}

std::string Bin(const std::string& name) {
  return std::string(DDPRUN_BIN_DIR) + "/" + name;
}

std::vector<nlohmann::json> ReadMetrics(const std::string& output_dir) {
  std::vector<nlohmann::json> records;
  std::ifstream in(output_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

std::string SyntheticData(const std::string& trainer, const std::string& args,
                          const std::string& file) {
  static std::map<std::string, std::string> made;
  const std::string key = trainer + " " + args;
  if (!made.count(key)) {
    // One directory per distinct `args`: a second data set must not wipe
    // the first.
    const std::string dir =
        FreshDir(trainer + "_data" + std::to_string(made.size()));
    CommandResult r = RunCommand(
        Bin(trainer + "_trainer") + " --make_synthetic " + dir + " " + args,
        120);
    if (r.exit_code != 0)
      throw std::runtime_error("--make_synthetic failed: " + r.output);
    made[key] = dir;
  }
  return made[key] + "/" + file;
}

std::string DirOf(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0) {
      files.push_back(entry.path().string());
    }
  }
  // events.out.tfevents.<10-digit time>.<host>[.n]: name order is time order.
  std::sort(files.begin(), files.end());
  return files;
}

nlohmann::json ReadEvents(const std::string& path) {
  CommandResult r = RunCommand("/usr/bin/python3 " +
                                   std::string(DDPRUN_SOURCE_DIR) +
                                   "/tests/outputs/read_tfevents.py " + path,
                               60);
  if (r.exit_code != 0) {
    throw std::runtime_error("read_tfevents.py " + path + ": " + r.output);
  }
  return nlohmann::json::parse(r.output);
}

std::pair<int, int> PngSize(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[24] = {0};
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h)) ||
      std::string(reinterpret_cast<char*>(h + 1), 3) != "PNG") {
    return {-1, -1};
  }
  auto be32 = [&](int at) {
    return (h[at] << 24) | (h[at + 1] << 16) | (h[at + 2] << 8) | h[at + 3];
  };
  return {be32(16), be32(20)};  // IHDR: width, height
}

std::vector<std::string> LinesWith(const std::string& output,
                                   const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

nlohmann::json UntrainedMetrics(const std::string& command,
                                const std::string& output_dir, int timeout_s) {
  CommandResult r = RunCommand(command + " --learning_rate 0", timeout_s);
  std::vector<nlohmann::json> metrics = ReadMetrics(output_dir);
  if (r.exit_code != 0 || metrics.empty()) {
    throw std::runtime_error("the untrained baseline run (exit " +
                             std::to_string(r.exit_code) + ") failed: " +
                             r.output);
  }
  return metrics.back();
}

}  // namespace ddprun::examples::testing

namespace ddprun::examples::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

int FindWorkerPid(const std::string& marker, int rank) {
  const std::string want = std::string("RANK=") + std::to_string(rank);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = ReadAll(entry.path() / "cmdline");
    if (cmdline.find(marker) == std::string::npos) continue;
    if (cmdline.find("_trainer") == std::string::npos) continue;
    const std::string environ = ReadAll(entry.path() / "environ");
    size_t pos = 0;
    while (pos < environ.size()) {
      size_t end = environ.find('\0', pos);
      if (end == std::string::npos) end = environ.size();
      if (environ.compare(pos, end - pos, want) == 0) return std::stoi(name);
      pos = end + 1;
    }
  }
  return -1;
}

long long NewestCheckpointStep(const std::string& dir) {
  long long best = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename();
    if (name.rfind("ckpt-", 0) != 0 || name.size() < 8 ||
        name.substr(name.size() - 3) != ".pt") {
      continue;
    }
    best = std::max(best, std::stoll(name.substr(5, name.size() - 8)));
  }
  return best;
}

FaultRun RunAndKillRank1(const std::string& command,
                         const std::string& output_dir, long long min_step,
                         int timeout_s) {
  FaultRun fault;
  ddprun::testing::ProcessOptions options;
  options.argv = {"/bin/sh", "-c", command};
  options.env = {{"OMP_NUM_THREADS", "1"}};
  options.name = "fault_run";
  options.merge_stderr = true;
  ddprun::testing::Process run(options);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  // Kill rank 1 once a checkpoint of min_step is on disk (or give up when
  // the job ends first).
  ddprun::testing::WaitUntil(
      [&] {
        if (!run.Running()) return true;
        const long long saved =
            NewestCheckpointStep(output_dir + "/checkpoints");
        if (saved < min_step) return false;
        const int victim = FindWorkerPid(output_dir, /*rank=*/1);
        if (victim > 0 && ::kill(victim, SIGKILL) == 0) {
          fault.saved_step = saved;
          fault.killed = true;
          return true;
        }
        return false;
      },
      std::chrono::seconds(timeout_s), std::chrono::milliseconds(20));
  fault.result.exit_code =
      run.Wait(std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now()));
  if (fault.result.exit_code < 0) {
    run.Stop(std::chrono::seconds(5));
    fault.result.exit_code = 124;
  }
  fault.result.output = run.Stdout();
  const std::string marker = "resumed from checkpoint at step ";
  const size_t at = fault.result.output.find(marker);
  if (at != std::string::npos) {
    fault.resumed_step =
        std::stoll(fault.result.output.substr(at + marker.size()));
  }
  return fault;
}

}  // namespace ddprun::examples::testing
