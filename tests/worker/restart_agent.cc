// The agent half of --restart_scope failed as a test stand-in
// (docs/restart_scope.md), until ddprun's own: hosts the c10d store (the
// LibTorch TCPStore a worker of this build speaks to), starts N workers with
// the environment an agent gives them, and replaces a failed worker alone,
// as a new generation, then waits for its heal. Every line it prints starts
// with "agent: ".
//
//   worker_restart_agent --nproc N --out DIR [--kill RANK@STEP]...
//       [--also_kill RANK] [--max_replacements K] [--heal_timeout S]
//       [--timeout S] [--env NAME=VALUE]... -- COMMAND ARGS...
//
// Workers get RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True,
// TORCHELASTIC_RESTART_COUNT=0, DDPRUN_RESTART_SCOPE=failed,
// DDPRUN_GENERATION=<g> and DDPRUN_STEP_FILE=DIR/steps.<rank>.<g>; their
// output goes to DIR/rank<rank>.gen<g>.out.
// --kill RANK@STEP: SIGKILL rank RANK's process once its step file counts
//   STEP (in the order given; the next kill is armed once the previous
//   generation healed).
// A worker that exits non-zero or by a signal while the others run is
// replaced (at most --max_replacements, default the number of --kill):
// the record /ddprun/generation/<g> (replaced, reason, source = the lowest
// other rank), then /ddprun/generation = g, then the replacement starts
// with DDPRUN_GENERATION=g and DDPRUN_REPLACEMENT=1; "/ddprun/generation/
// <g>/healed" is awaited for --heal_timeout.
// --also_kill RANK: right after the first replacement starts, SIGKILL RANK
//   too (a second failure while healing); from then on nothing is replaced,
//   as ddprun would restart the group: the workers must all exit, none
//   may hang.
// Exit code: 0 when the last process of every rank exited 0, 1 otherwise,
// 2 when --timeout passed (everything is killed).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "tests/support/process.h"
#include "worker/src/torch_compat.h"

namespace {

using Clock = std::chrono::steady_clock;
using ddprun::testing::Process;
using ddprun::testing::ProcessOptions;

void Say(const std::string& line) {
  std::printf("agent: %s\n", line.c_str());
  std::fflush(stdout);
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Options {
  int nproc = 2;
  std::string out;
  std::vector<std::pair<int, int64_t>> kills;
  int also_kill = -1;
  int max_replacements = -1;
  int heal_timeout_s = 60;
  int timeout_s = 300;
  std::map<std::string, std::string> env;
  std::vector<std::string> command;
};

Options Parse(int argc, char** argv) {
  Options o;
  int i = 1;
  auto value = [&](const char* flag) -> std::string {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "agent: %s needs a value\n", flag);
      std::exit(64);
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) o.command.push_back(argv[i]);
      break;
    } else if (a == "--nproc") {
      o.nproc = std::stoi(value("--nproc"));
    } else if (a == "--out") {
      o.out = value("--out");
    } else if (a == "--kill") {
      const std::string k = value("--kill");
      const size_t at = k.find('@');
      o.kills.emplace_back(std::stoi(k.substr(0, at)),
                           std::stoll(k.substr(at + 1)));
    } else if (a == "--also_kill") {
      o.also_kill = std::stoi(value("--also_kill"));
    } else if (a == "--max_replacements") {
      o.max_replacements = std::stoi(value("--max_replacements"));
    } else if (a == "--heal_timeout") {
      o.heal_timeout_s = std::stoi(value("--heal_timeout"));
    } else if (a == "--timeout") {
      o.timeout_s = std::stoi(value("--timeout"));
    } else if (a == "--env") {
      const std::string kv = value("--env");
      o.env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    } else {
      std::fprintf(stderr, "agent: unknown argument %s\n", a.c_str());
      std::exit(64);
    }
  }
  if (o.out.empty() || o.command.empty() || o.nproc < 1) {
    std::fprintf(stderr, "agent: need --out DIR and -- COMMAND\n");
    std::exit(64);
  }
  if (o.max_replacements < 0) {
    o.max_replacements = static_cast<int>(o.kills.size());
  }
  return o;
}

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

int64_t StepsOf(const std::string& path) {
  const std::string text = ddprun::testing::ReadFile(path);
  return text.empty() ? 0 : std::atoll(text.c_str());
}

class StandIn {
 public:
  explicit StandIn(Options o) : o_(std::move(o)), procs_(o_.nproc) {}

  int Run() {
    std::filesystem::create_directories(o_.out);
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.multiTenant = true;
    store_ = ddprun::worker::torch_compat::MakeTcpStore("127.0.0.1", so);
    port_ = store_->getPort();
    Say("store on port " + std::to_string(port_));
    for (int r = 0; r < o_.nproc; ++r) Start(r, /*replacement=*/false);
    const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
    size_t next_kill = 0;
    while (true) {
      if (Clock::now() > deadline) {
        Say("timeout after " + std::to_string(o_.timeout_s) +
            " s: killing every worker");
        for (auto& p : procs_) p.process->Signal(SIGKILL);
        Report();
        return 2;
      }
      if (!healing_ && next_kill < o_.kills.size()) {
        auto [rank, step] = o_.kills[next_kill];
        Worker& w = procs_[rank];
        const int64_t steps = StepsOf(w.steps_file);
        if (w.process->Running() && steps >= step) {
          w.process->Signal(SIGKILL);
          Say("killed rank " + std::to_string(rank) + " (pid " +
              std::to_string(w.process->pid()) + ") at step " +
              std::to_string(steps));
          ++next_kill;
        }
      }
      bool all_done = true;
      for (int r = 0; r < o_.nproc; ++r) {
        Worker& w = procs_[r];
        if (w.process->Running()) {
          all_done = false;
          continue;
        }
        if (w.reported) continue;
        w.reported = true;
        const int code = w.process->exit_code();
        Say("rank " + std::to_string(r) + " (pid " +
            std::to_string(w.process->pid()) + ", generation " +
            std::to_string(w.generation) + ") exited " + std::to_string(code));
        if (code == 0) continue;
        if (healing_) {
          Say("a second failure while generation " +
              std::to_string(generation_) +
              " heals: no more replacements (ddprun restarts the group)");
          fallback_ = true;
        }
        if (fallback_ || replacements_ >= o_.max_replacements) {
          fallback_ = true;
          continue;
        }
        Replace(r, code);
        all_done = false;
      }
      if (healing_) CheckHealed();
      if (all_done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Report();
  }

 private:
  struct Worker {
    std::unique_ptr<Process> process;
    int generation = 0;
    std::string steps_file;
    bool reported = false;
  };

  void Start(int rank, bool replacement) {
    Worker& w = procs_[rank];
    w.generation = generation_;
    w.reported = false;
    w.steps_file = o_.out + "/steps." + std::to_string(rank) + "." +
                   std::to_string(generation_);
    ProcessOptions p;
    p.argv = o_.command;
    p.env = o_.env;
    p.env["RANK"] = std::to_string(rank);
    p.env["WORLD_SIZE"] = std::to_string(o_.nproc);
    p.env["LOCAL_RANK"] = std::to_string(rank);
    p.env["LOCAL_WORLD_SIZE"] = std::to_string(o_.nproc);
    p.env["GROUP_RANK"] = "0";
    p.env["MASTER_ADDR"] = "127.0.0.1";
    p.env["MASTER_PORT"] = std::to_string(port_);
    p.env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    p.env["TORCHELASTIC_RESTART_COUNT"] = "0";
    p.env["TORCHELASTIC_RUN_ID"] = "restart_agent";
    p.env["DDPRUN_RESTART_SCOPE"] = "failed";
    p.env["DDPRUN_GENERATION"] = std::to_string(generation_);
    p.env["DDPRUN_STEP_FILE"] = w.steps_file;
    if (p.env.count("OMP_NUM_THREADS") == 0) p.env["OMP_NUM_THREADS"] = "1";
    if (replacement) p.env["DDPRUN_REPLACEMENT"] = "1";
    p.output_dir = o_.out;
    p.name =
        "rank" + std::to_string(rank) + ".gen" + std::to_string(generation_);
    p.merge_stderr = true;
    w.process = std::make_unique<Process>(p);
    Say("rank " + std::to_string(rank) + " pid " +
        std::to_string(w.process->pid()) + " generation " +
        std::to_string(generation_) + (replacement ? " (replacement)" : ""));
  }

  void Replace(int rank, int code) {
    ++generation_;
    ++replacements_;
    int source = 0;
    while (source == rank) ++source;
    const std::string record =
        "{\"replaced\":[" + std::to_string(rank) + "],\"reason\":\"exit code " +
        std::to_string(code) + "\",\"source\":" + std::to_string(source) + "}";
    const std::string g = std::to_string(generation_);
    store_->set("/ddprun/generation/" + g, Bytes(record));
    store_->set("/ddprun/generation", Bytes(g));
    heal_start_ = Clock::now();
    healing_ = true;
    Say("generation " + g + ": " + record);
    Start(rank, /*replacement=*/true);
    if (o_.also_kill >= 0 && replacements_ == 1) {
      Worker& second = procs_[o_.also_kill];
      second.process->Signal(SIGKILL);
      Say("killed rank " + std::to_string(o_.also_kill) + " (pid " +
          std::to_string(second.process->pid()) + ") while generation " + g +
          " heals");
      fallback_ = true;
    }
  }

  void CheckHealed() {
    const std::string key =
        "/ddprun/generation/" + std::to_string(generation_) + "/healed";
    if (store_->check({key})) {
      Say("generation " + std::to_string(generation_) + " healed in " +
          std::to_string(Since(heal_start_)) + " s");
      healing_ = false;
      return;
    }
    if (Since(heal_start_) > o_.heal_timeout_s) {
      Say("generation " + std::to_string(generation_) +
          " did not heal within " + std::to_string(o_.heal_timeout_s) +
          " s: no more replacements");
      healing_ = false;
      fallback_ = true;
    }
  }

  int Report() {
    bool ok = true;
    for (int r = 0; r < o_.nproc; ++r) {
      Worker& w = procs_[r];
      w.process->Wait(std::chrono::seconds(10));
      const int code = w.process->exit_code();
      ok = ok && code == 0;
      Say("final rank " + std::to_string(r) + " pid " +
          std::to_string(w.process->pid()) + " generation " +
          std::to_string(w.generation) + " exit " + std::to_string(code));
    }
    Say(ok ? "done" : "failed");
    return ok ? 0 : 1;
  }

  Options o_;
  std::vector<Worker> procs_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  int port_ = 0;
  int generation_ = 0;
  int replacements_ = 0;
  bool healing_ = false;
  bool fallback_ = false;
  Clock::time_point heal_start_;
};

}  // namespace

int main(int argc, char** argv) { return StandIn(Parse(argc, argv)).Run(); }
