// chaos_workload: a small, deterministic DDP job for the chaos suite.
//
// A 2-layer MLP learns y = sin(0.5 * sum(x)) with SGD + momentum. The data
// of step s is a fixed global batch drawn from a generator seeded with s;
// rank r of W takes rows r, r+W, ... and scales its loss by W/G, so after
// DDP's gradient average every step is the same computation for any world
// size (bit-exact for an unchanged world size, equal up to float rounding
// when the world size changes). Checkpoints (model + optimizer) go through
// the worker runtime every --ckpt_every steps; a restarted worker resumes
// from the newest complete one.
//
// Rank 0 appends to <out>/events (one line each, wall time in seconds):
//   start attempt=<TORCHELASTIC_RESTART_COUNT> world=<W> resume=<step>
//         pid=<pid> t=<wall>          after init and resume
//   saved <step> t=<wall>             after each checkpoint
// and the failing rank, before an injected failure:
//   fail step=<step> pid=<pid> t=<wall>
// and writes <out>/result at the end:
//   steps=<N> world=<W> fnv=<hash of the parameter bytes>
//   <every parameter value, %.9g, space separated>
//
// Fault injection from inside (the rest comes from outside, by signals):
// --fail_step S --fail_rank R --fail_mode exit|segv|hang [--fail_attempts A]
// makes global rank R, at step S of attempts 0..A-1 (default 1), throw (exit
// code 1 with an error file), raise SIGSEGV or hang (sleep, no heartbeat).
//
// Usage: chaos_workload --out DIR --ckpt_dir DIR [--steps 40]
//        [--ckpt_every 10] [--step_ms 50] [fault flags]

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/heartbeat.h"
#include "ddprun/worker/run_main.h"
#include "ddprun/worker/world.h"

namespace w = ddprun::worker;

namespace {

constexpr int64_t kGlobalBatch = 8;
constexpr int64_t kInputs = 8;

struct Args {
  std::string out;
  std::string ckpt_dir;
  int64_t steps = 40;
  int64_t ckpt_every = 10;
  int step_ms = 50;
  int64_t fail_step = -1;
  int fail_rank = 0;
  std::string fail_mode = "exit";
  int fail_attempts = 1;
};

// A 2-layer MLP (8 -> 16 -> 1, tanh) whose weights live in one flat
// parameter: DDP rebuilds its gradient buckets in the order gradients became
// ready after the first step of every process, and with several parameters
// that changes where each value falls in the ring all-reduce (the order of
// the float additions) for world sizes > 2, so a resumed run would differ
// from an uninterrupted one in the last bits. One parameter, one layout.
struct Net : torch::nn::Module {
  static constexpr int64_t kHidden = 16;
  static constexpr int64_t kSize = kHidden * kInputs + kHidden + kHidden + 1;
  Net() : theta(register_parameter("theta", at::randn({kSize}) * 0.3)) {}
  at::Tensor forward(const at::Tensor& x) {
    int64_t offset = 0;
    auto take = [&](int64_t n) {
      at::Tensor t = theta.slice(0, offset, offset + n);
      offset += n;
      return t;
    };
    at::Tensor w1 = take(kHidden * kInputs).view({kHidden, kInputs});
    at::Tensor b1 = take(kHidden);
    at::Tensor w2 = take(kHidden).view({1, kHidden});
    at::Tensor b2 = take(1);
    return at::linear(at::tanh(at::linear(x, w1, b1)), w2, b2);
  }
  at::Tensor theta;
};

double WallSeconds() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void AppendEvent(const Args& a, const std::string& line) {
  std::ofstream out(a.out + "/events", std::ios::app);
  char t[64];
  std::snprintf(t, sizeof(t), " t=%.6f\n", WallSeconds());
  out << line << t;
}

uint64_t Fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void WriteResult(const Args& a, Net& net, int world) {
  uint64_t h = 1469598103934665603ull;
  std::string values;
  for (const at::Tensor& p : net.parameters()) {
    at::Tensor c = p.detach().contiguous();
    h = Fnv1a(c.data_ptr<float>(), c.numel() * sizeof(float), h);
    const float* v = c.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.9g ", v[i]);
      values += buf;
    }
  }
  char head[128];
  std::snprintf(head, sizeof(head), "steps=%lld world=%d fnv=%016llx\n",
                static_cast<long long>(a.steps), world,
                static_cast<unsigned long long>(h));
  const std::string tmp = a.out + "/result.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << head << values << "\n";
  }
  std::rename(tmp.c_str(), (a.out + "/result").c_str());
}

int Train(const Args& a) {
  w::World world = w::InitFromEnv();
  const char* rc = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int attempt = rc != nullptr ? std::atoi(rc) : 0;
  torch::manual_seed(42);
  auto net = std::make_shared<Net>();
  w::DistributedDataParallel ddp(world, net);
  torch::optim::SGD sgd(net->parameters(),
                        torch::optim::SGDOptions(0.05).momentum(0.9));
  w::CheckpointOptions copt;
  copt.dir = a.ckpt_dir;
  copt.every_steps = a.ckpt_every;
  copt.keep_last = 2;
  w::Checkpointer checkpointer(world, copt);
  w::CheckpointParts parts;
  parts.model = net.get();
  parts.optimizer = &sgd;
  parts.rng = false;  // the data generators are seeded per step
  w::TrainState state;
  if (auto loaded = checkpointer.LoadLatest(parts)) state = *loaded;
  if (world.is_main()) {
    AppendEvent(a, "start attempt=" + std::to_string(attempt) +
                       " world=" + std::to_string(world.world_size()) +
                       " resume=" + std::to_string(state.step) +
                       " pid=" + std::to_string(::getpid()));
  }
  const int64_t ws = world.world_size();
  const at::Tensor rows = at::arange(world.rank(), kGlobalBatch, ws);
  while (state.step < a.steps) {
    w::Heartbeat();
    if (state.step == a.fail_step && world.rank() == a.fail_rank &&
        attempt < a.fail_attempts) {
      std::fprintf(stderr, "chaos_workload: injected %s at step %lld\n",
                   a.fail_mode.c_str(), static_cast<long long>(state.step));
      AppendEvent(a, "fail step=" + std::to_string(state.step) +
                         " pid=" + std::to_string(::getpid()));
      if (a.fail_mode == "segv") std::raise(SIGSEGV);
      if (a.fail_mode == "hang") {
        // Deadlocked without being stopped: only the heartbeat tells.
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
      throw w::WorkerError("chaos_workload: injected failure at step " +
                           std::to_string(state.step));
    }
    auto gen = at::detail::createCPUGenerator(1000 + state.step);
    at::Tensor x = at::randn({kGlobalBatch, kInputs}, gen);
    at::Tensor y = at::sin(x.sum(1, /*keepdim=*/true) * 0.5);
    at::Tensor mine = x.index_select(0, rows);
    at::Tensor diff = net->forward(mine) - y.index_select(0, rows);
    at::Tensor loss = diff.pow(2).sum() * (static_cast<double>(ws) /
                                           static_cast<double>(kGlobalBatch));
    sgd.zero_grad();
    ddp.Backward(loss);
    sgd.step();
    ++state.step;
    if (checkpointer.ShouldSave(state.step)) {
      checkpointer.Save(state, parts);
      if (world.is_main()) {
        AppendEvent(a, "saved " + std::to_string(state.step));
      }
    }
    if (a.step_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(a.step_ms));
    }
  }
  if (world.is_main()) WriteResult(a, *net, world.world_size());
  return 0;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw w::ConfigError(flag + " expects a value");
    const std::string v = argv[++i];
    if (flag == "--out") {
      a.out = v;
    } else if (flag == "--ckpt_dir") {
      a.ckpt_dir = v;
    } else if (flag == "--steps") {
      a.steps = std::stoll(v);
    } else if (flag == "--ckpt_every") {
      a.ckpt_every = std::stoll(v);
    } else if (flag == "--step_ms") {
      a.step_ms = std::stoi(v);
    } else if (flag == "--fail_step") {
      a.fail_step = std::stoll(v);
    } else if (flag == "--fail_rank") {
      a.fail_rank = std::stoi(v);
    } else if (flag == "--fail_mode") {
      a.fail_mode = v;
    } else if (flag == "--fail_attempts") {
      a.fail_attempts = std::stoi(v);
    } else {
      throw w::ConfigError("chaos_workload: unknown flag " + flag);
    }
  }
  if (a.out.empty() || a.ckpt_dir.empty()) {
    throw w::ConfigError("chaos_workload: --out and --ckpt_dir are required");
  }
  if (a.fail_mode != "exit" && a.fail_mode != "segv" && a.fail_mode != "hang") {
    throw w::ConfigError("chaos_workload: --fail_mode is exit, segv or hang");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  return w::RunMain([&] { return Train(ParseArgs(argc, argv)); });
}
