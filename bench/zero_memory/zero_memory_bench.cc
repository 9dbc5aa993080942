// One rank of the ZeRO memory benchmark (see run.py): vqa_trainer's model
// (VqaModel, wider than its default so the optimizer state is large enough
// to show in a process's memory) trained for a few steps on random batches
// with one of vqa's optimizer settings:
//   adam           torch Adam + DDP                (--zero 0)
//   zero1          DDP + ShardedAdam               (--zero 1)
//   zero2          ShardedAdam reducing gradients  (--zero 2)
//   zero2_offload  the same, state and update on the CPU
//                  (--zero 2 --offload_optimizer cpu)
// Prints one JSON line per rank: parameters, the optimizer state this rank
// holds beside the parameters (on their device) and in host memory, its
// peak RSS (VmHWM) and the median step time.
//   zero_memory_bench MODE [WIDTH] [STEPS] [BATCH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/run_main.h"
#include "ddprun/worker/sharded_adam.h"
#include "ddprun/worker/world.h"
#include "examples/vqa/vqa_model.h"

namespace w = ddprun::worker;
namespace ex = ddprun::examples;

namespace {

// VmHWM of /proc/self/status in kB (-1 when unreadable).
long long PeakRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

int Bench(const std::string& mode, int64_t width, int steps, int64_t batch) {
  if (mode != "adam" && mode != "zero1" && mode != "zero2" &&
      mode != "zero2_offload") {
    throw w::ConfigError("mode must be adam, zero1, zero2 or zero2_offload");
  }
  w::World world = w::InitFromEnv();
  torch::manual_seed(3);
  ex::VqaModelOptions o;
  o.vocab_size = 16;
  o.num_answers = 7;
  o.width = width;
  ex::VqaModel model(o);
  model->to(world.device());
  std::vector<at::Tensor> params = model->parameters();
  int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();

  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<w::ShardedAdam> sharded;
  std::unique_ptr<w::DistributedDataParallel> ddp;
  if (mode == "adam") {
    adam = std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(1e-3));
  } else {
    w::ShardedAdamOptions so;
    so.lr = 1e-3;
    so.reduce_gradients = mode != "zero1";
    so.offload_to_cpu = mode == "zero2_offload";
    sharded = std::make_unique<w::ShardedAdam>(world, params, so);
  }
  if (mode == "adam" || mode == "zero1") {
    ddp = std::make_unique<w::DistributedDataParallel>(world, model.ptr());
  }

  const auto on = torch::TensorOptions().device(world.device());
  std::vector<double> seconds;
  for (int s = 0; s < steps; ++s) {
    at::Tensor images = torch::rand({batch, 1, 64, 64}, on);
    at::Tensor tokens =
        torch::randint(1, 16, {batch, 12}, on.dtype(torch::kInt64));
    at::Tensor answers = torch::randint(0, 7, {batch}, on.dtype(torch::kInt64));
    at::Tensor labels = torch::bernoulli(torch::full({batch, 14}, 0.5, on));
    world.Barrier();
    const auto start = std::chrono::steady_clock::now();
    if (adam) adam->zero_grad();
    if (sharded) sharded->ZeroGrad();
    auto [answer_logits, label_logits] = model->forward(images, tokens);
    at::Tensor loss =
        torch::nn::functional::cross_entropy(answer_logits, answers) +
        torch::binary_cross_entropy_with_logits(label_logits, labels);
    if (ddp) {
      ddp->Backward(loss);
    } else {
      loss.backward();
    }
    if (adam) adam->step();
    if (sharded) sharded->Step();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(seconds.begin(), seconds.end());
  // torch Adam keeps exp_avg and exp_avg_sq per parameter (and a step
  // count), all on the parameters' device.
  const long long full = 2LL * 4 * numel;
  const long long state = sharded ? sharded->state_bytes() : full;
  const long long device = sharded ? sharded->device_state_bytes() : full;
  std::printf(
      "{\"mode\": \"%s\", \"rank\": %d, \"world\": %d, \"params\": %lld, "
      "\"state_bytes\": %lld, \"device_state_bytes\": %lld, "
      "\"host_state_bytes\": %lld, \"peak_rss_kb\": %lld, "
      "\"step_s\": %.4f}\n",
      mode.c_str(), world.rank(), world.world_size(),
      static_cast<long long>(numel), state, device, state - device, PeakRssKb(),
      seconds[seconds.size() / 2]);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return w::RunMain([&] {
    if (argc < 2) {
      throw w::ConfigError(
          "usage: zero_memory_bench adam|zero1|zero2|zero2_offload [WIDTH] "
          "[STEPS] [BATCH]");
    }
    return Bench(argv[1], argc > 2 ? std::stoll(argv[2]) : 128,
                 argc > 3 ? std::stoi(argv[3]) : 4,
                 argc > 4 ? std::stoll(argv[4]) : 4);
  });
}
