#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>
#include <nlohmann/json.hpp>

#include "ddprun/worker/world.h"
#include "examples/ddpm/fast_ddpm.h"

namespace ddprun::examples {

// Splits [N, 4, D, H, W] volumes into the target modality [N, 1, ...]
// (noised and synthesized) and the other three, the conditions [N, 3, ...],
// in channel order. Runs on the volumes' device (no host copy).
std::pair<torch::Tensor, torch::Tensor> SplitTarget(
    const torch::Tensor& volumes, int64_t target);

// One validation case for the picture: [1, 4, S, S, S] volume and its
// sample [1, 1, S, S, S], on any device.
struct SampleCase {
  torch::Tensor volume;
  torch::Tensor sample;
};

// The picture of what the model produces: per case one row with the middle
// axial slice (the middle of D) of each condition modality, the sample and
// the target, labelled with BraTS modality names ("flair sample", "flair
// truth"), one gray scale for the whole picture; as a [C, H, W] tensor in
// [0, 1] for TrainerSession::EmitImage. Throws std::invalid_argument for no
// cases.
torch::Tensor SamplePanel(const std::vector<SampleCase>& cases, int64_t target,
                          const std::string& title);

// What Validate needs. `net(x_t, t, cond)` is the network (eval mode, no
// grad) returning its prediction for a batch; `load(item)` returns case
// `item` as [4, S, S, S] on the CPU (throws on a bad file).
struct ValidationSetup {
  worker::World world;
  const FastDdpm* ddpm = nullptr;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                              const torch::Tensor&)>
      net;
  std::function<torch::Tensor(int64_t)> load;
  int64_t target_modality = 3;
  // Rank 0 writes its first case as <samples_dir>/epoch<E>_size<S>.nii
  // (sample and truth as 2 channels); empty: none.
  std::string samples_dir;
  int64_t panel_cases = 2;  // cases kept for the picture (rank 0)
};

struct ValidationResult {
  nlohmann::json record;          // val_psnr, val_ssim, their constant-guess
                                  // references, val_cases (over all ranks)
  std::vector<SampleCase> panel;  // rank 0's first cases (CPU)
};

// Samples every case of `items` (this rank's share) on the Fast-DDPM
// schedule from fresh noise and scores it (PSNR and SSIM, data range 2)
// against its target; scores a constant guess (the target's own mean) the
// same way for reference. Sums are all-reduced: collective, one all-reduce.
ValidationResult Validate(const ValidationSetup& setup,
                          const std::vector<int64_t>& items, int64_t epoch,
                          int64_t size);

}  // namespace ddprun::examples
