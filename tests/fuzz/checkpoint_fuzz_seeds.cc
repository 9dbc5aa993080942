// Seeds of the checkpoint fuzz targets: checkpoints as Checkpointer writes
// them (a small model with its optimizer and RNG state; metadata only; a
// named best file). `checkpoint_fuzz_replay --write_seeds DIR` writes them
// out; corpus/checkpoint/ and corpus/checkpoint_file/ hold copies.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "ddprun/worker/checkpoint.h"
#include "fuzz_seeds.h"
#include "fuzz_temp_dir.h"

std::vector<std::string> DdprunFuzzSeeds() {
  namespace w = ddprun::worker;
  const ddprun::fuzz::FuzzTempDir dir;
  w::World world;
  w::Checkpointer ckpt(world, {dir.path(), 1, /*keep_last=*/8});
  torch::nn::Linear net(3, 2);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
  // One step, so that the optimizer has state to save.
  adam.zero_grad();
  net->forward(torch::ones({4, 3})).sum().backward();
  adam.step();
  w::CheckpointParts full;
  full.model = net.ptr().get();
  full.optimizer = &adam;
  w::CheckpointParts meta;
  meta.rng = false;
  using ddprun::fuzz::ReadBytes;
  std::vector<std::string> seeds;
  seeds.push_back(ReadBytes(ckpt.Save({1, 12, 3, {{"lr", 1e-3}}}, full)));
  seeds.push_back(ReadBytes(ckpt.Save({0, 13, 0, {}}, meta)));
  seeds.push_back(ReadBytes(ckpt.SaveNamed(
      "best.pt", {2, 14, 5, {{"metric/val_loss", 0.25}}}, full)));
  return seeds;
}
