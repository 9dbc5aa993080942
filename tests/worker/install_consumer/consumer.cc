// Built against an installed ddprun worker runtime: the public headers, the
// exported targets and the Torch dependency must all resolve from the
// install prefix alone. Prints what the test checks: the all-reduced sum of
// (rank + 1) and the step resumed from a checkpoint it saved itself.
#include <cstdio>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "ddprun/worker/worker.h"

namespace dw = ddprun::worker;

int main(int argc, char** argv) {
  return dw::RunMain([&] {
    if (argc != 2) throw dw::ConfigError("usage: consumer CHECKPOINT_DIR");
    dw::World world = dw::InitFromEnv();
    at::Tensor t = at::full({1}, world.rank() + 1.0, at::kFloat);
    world.AllReduce(t);

    torch::nn::Linear model(2, 1);
    dw::CheckpointOptions options;
    options.dir = argv[1];
    dw::Checkpointer ckpt(world, options);
    dw::CheckpointParts parts;
    parts.model = model.get();
    dw::TrainState state;
    state.step = 7;
    ckpt.Save(state, parts);
    auto resumed = ckpt.LoadLatest(parts);
    std::printf("consumer rank %d/%d sum %g resumed_step %lld\n", world.rank(),
                world.world_size(), t.item<double>(),
                static_cast<long long>(resumed ? resumed->step : -1));
    return 0;
  });
}
