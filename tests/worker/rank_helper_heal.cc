// rank_helper heal OUT STEPS: the worker side of restart scope "failed"
// (docs/restart_scope.md) on a tiny model, with the worker runtime's pieces
// alone (World::Reform, StepCommit, Heal; TrainerSession does the same for
// the trainers): DDP over a conv net with batch norm and dropout, Adam, a
// batch per rank per step; the step agreement before every optimizer step;
// after a CollectiveError the step's start is put back, the world re-forms,
// every rank heals from the generation's source, and the step is redone.
// A replacement (DDPRUN_REPLACEMENT=1) heals before its first step. Each
// rank writes its final parameters and buffers to OUT.<rank> and prints
// "rank R done step S generation G".
// HEAL_DIE=RANK:STEP:PHASE makes the first process of RANK (not a
// replacement) SIGKILL itself in step STEP (1-based) at PHASE: "start"
// (before the forward), "allreduce" (in backward, once the first bucket's
// all-reduce is under way: the hook of the first layer's gradient, which
// backward computes last), "agree" (after the step's last collective,
// before it adds itself to the agreement) or "apply" (the step committed,
// before the optimizer applies it). HEAL_STEP_MS slows every step down.
// HEAL_SHARDED=1 uses ShardedAdam (ZeRO-1 under DDP), which cannot be
// healed: the ranks exit with CollectiveError.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize/archive.h>

#include "ddprun/worker/heartbeat.h"
#include "ddprun/worker/worker.h"

namespace w = ddprun::worker;

namespace {

// A conv net with batch norm (buffers a step changes) and dropout (random
// draws a step makes).
torch::nn::Sequential TinyNet() {
  return torch::nn::Sequential(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)),
      torch::nn::BatchNorm2d(4), torch::nn::ReLU(), torch::nn::Dropout(0.3),
      torch::nn::Flatten(), torch::nn::Linear(4 * 8 * 8, 3));
}

// Where this process dies (HEAL_DIE), if it does.
struct Death {
  int step = -1;
  std::string phase;
};

Death DeathOf(int rank) {
  Death d;
  const char* spec = std::getenv("HEAL_DIE");
  if (spec == nullptr || std::getenv("DDPRUN_REPLACEMENT") != nullptr) {
    return d;
  }
  int r = -1, s = -1;
  char phase[32] = {0};
  if (std::sscanf(spec, "%d:%d:%31s", &r, &s, phase) == 3 && r == rank) {
    d.step = s;
    d.phase = phase;
  }
  return d;
}

void DieIf(const Death& d, int64_t step, const char* phase) {
  if (d.step == step && d.phase == phase) raise(SIGKILL);
}

}  // namespace

int HealTraining(const std::string& out, int64_t steps) {
  w::World world = w::InitFromEnv();
  const int rank = world.rank(), n = world.world_size();
  const Death death = DeathOf(rank);
  torch::manual_seed(1000 + rank);  // DDP must broadcast rank 0's init
  torch::nn::Sequential net = TinyNet();
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
  std::unique_ptr<w::ShardedAdam> zero;
  w::CheckpointParts parts;
  parts.model = net.ptr().get();
  if (std::getenv("HEAL_SHARDED") != nullptr) {
    w::ShardedAdamOptions zo;
    zo.lr = 0.01;
    zo.reduce_gradients = false;  // DDP averages
    zero = std::make_unique<w::ShardedAdam>(world, net->parameters(), zo);
    parts.sharded_optimizer = zero.get();
  } else {
    parts.optimizer = &adam;
  }
  w::DdpOptions ddp_options;
  ddp_options.bucket_cap_mb = 0.001;  // two buckets: conv and fc
  std::unique_ptr<w::DistributedDataParallel> ddp;
  w::StepCommit commit(world);
  w::TrainState state;
  bool has_state = !world.env().replacement;
  const int64_t step_ms =
      std::getenv("HEAL_STEP_MS") ? std::atoll(std::getenv("HEAL_STEP_MS")) : 0;
  // The first layer's gradient comes last in backward.
  int64_t current = 0;
  net[0]->as<torch::nn::Conv2d>()->weight.register_hook(
      [&](const at::Tensor&) { DieIf(death, current, "allreduce"); });

  std::vector<std::vector<size_t>> layout;
  auto drop_ddp = [&] {
    if (ddp) layout = ddp->bucket_layout();
    ddp.reset();
  };
  auto heal = [&](std::string why) {
    for (;;) {
      try {
        w::HealResult healed = w::Heal(world, has_state, state, parts);
        state = healed.state;
        has_state = true;
        w::DdpOptions o = ddp_options;
        o.broadcast_initial_state = false;
        // The source's buckets: a Gloo all-reduce then sums as before.
        o.layout_root = healed.source;
        o.layout = layout;
        ddp = std::make_unique<w::DistributedDataParallel>(world, net.ptr(), o);
        return;
      } catch (const w::CollectiveError& e) {
        why = e.what();
      }
      drop_ddp();
      world.Reform(why);
    }
  };
  if (has_state) {
    ddp = std::make_unique<w::DistributedDataParallel>(world, net.ptr(),
                                                       ddp_options);
  } else {
    heal("replacement");
  }

  auto gen = at::detail::createCPUGenerator(123);
  const at::Tensor x = at::randn({steps * n * 4, 1, 8, 8}, gen);
  const at::Tensor y = at::randint(0, 3, {steps * n * 4}, gen);
  std::vector<at::Tensor> saved_buffers;
  while (state.step < steps) {
    current = state.step + 1;
    saved_buffers.clear();
    for (const at::Tensor& b : net->buffers()) {
      saved_buffers.push_back(b.detach().clone());
    }
    try {
      DieIf(death, current, "start");
      for (auto& [kind, g] : w::DefaultGenerators(world.device())) {
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_current_seed(w::MixSeed({7, static_cast<uint64_t>(rank),
                                       static_cast<uint64_t>(state.step)}));
      }
      if (zero) {
        zero->ZeroGrad();
      } else {
        adam.zero_grad();
      }
      net->train();
      const int64_t begin = (state.step * n + rank) * 4;
      at::Tensor loss = torch::nn::functional::cross_entropy(
          net->forward(x.narrow(0, begin, 4)), y.narrow(0, begin, 4));
      ddp->Backward(loss);
      at::Tensor mean = loss.detach().to(at::kDouble).reshape({1});
      world.AllReduce(mean);
      DieIf(death, current, "agree");
      if (!commit.Agree(current)) {
        throw w::CollectiveError("step " + std::to_string(current) +
                                 " aborted");
      }
      DieIf(death, current, "apply");
      if (zero) {
        zero->Step();
      } else {
        adam.step();
      }
      ++state.step;
      w::Heartbeat();
      if (step_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      }
    } catch (const w::CollectiveError& e) {
      commit.AbortUnlessAdded(current);
      if (zero) {
        throw w::CollectiveError(std::string(w::ShardedOptimizerCannotHeal()) +
                                 " (" + e.what() + ")");
      }
      torch::NoGradGuard no_grad;
      size_t i = 0;
      for (const at::Tensor& b : net->buffers()) {
        b.detach().copy_(saved_buffers[i++]);
      }
      drop_ddp();
      world.Reform(e.what());
      heal(e.what());
    }
  }
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : net->parameters()) {
    flat.push_back(p.detach().flatten().to(at::kFloat));
  }
  for (const at::Tensor& b : net->buffers()) {
    flat.push_back(b.detach().flatten().to(at::kFloat));
  }
  const at::Tensor all = at::cat(flat).contiguous();
  std::ofstream(out + "." + std::to_string(rank), std::ios::binary)
      .write(reinterpret_cast<const char*>(all.data_ptr<float>()),
             static_cast<std::streamsize>(all.numel() * sizeof(float)));
  std::printf("rank %d done step %lld generation %lld\n", rank,
              static_cast<long long>(state.step),
              static_cast<long long>(world.generation()));
  return 0;
}

namespace {

uint64_t Fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void Digest(torch::serialize::InputArchive& a, const std::string& prefix,
            std::vector<std::string>* lines) {
  for (const std::string& key : a.keys()) {
    at::Tensor t;
    torch::serialize::InputArchive sub;
    c10::IValue value;
    char buf[160];
    if (a.try_read(key, t)) {
      const at::Tensor c = t.contiguous().cpu();
      std::snprintf(buf, sizeof(buf), "%s %s %016llx",
                    c10::toString(c.scalar_type()), c10::str(c.sizes()).c_str(),
                    static_cast<unsigned long long>(
                        Fnv1a(c.data_ptr(), c.nbytes())));
      lines->push_back(prefix + key + " " + buf);
    } else if (a.try_read(key, sub)) {
      Digest(sub, prefix + key + "/", lines);
    } else if (a.try_read(key, value)) {
      lines->push_back(prefix + key + " = " +
                       (value.isString() ? value.toStringRef()
                                         : value.tagKind()));
    }
  }
}

}  // namespace

// rank_helper ckpt_digest PATH: one line per tensor of a checkpoint of ours
// (name, dtype, shape, FNV-1a of its bytes), recursively, and one line per
// TrainState scalar ("scalar NAME BITS"), sorted: two checkpoints hold the
// same state when their lines are equal (tests/examples/restart_scope_test
// leaves out the lines that hold timings).
int CheckpointDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), {});
  if (data.size() < 32 || data.compare(data.size() - 32, 8, "DDPCKPT1") != 0) {
    throw w::WorkerError(path + " is not a checkpoint of ours");
  }
  torch::serialize::InputArchive archive;
  archive.load_from(data.data(), data.size() - 32, c10::Device(c10::kCPU));
  std::vector<std::string> lines;
  Digest(archive, "", &lines);
  c10::IValue names;
  at::Tensor values;
  if (archive.try_read("meta/scalar_names", names) &&
      archive.try_read("meta/scalar_values", values)) {
    std::istringstream list(names.toStringRef());
    std::string name;
    for (int64_t i = 0; std::getline(list, name) && i < values.numel(); ++i) {
      const double v = values[i].item<double>();
      uint64_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%016llx",
                    static_cast<unsigned long long>(bits));
      lines.push_back("scalar " + name + " " + buf);
    }
  }
  std::sort(lines.begin(), lines.end());
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  return 0;
}
