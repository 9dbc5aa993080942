#include "examples/cascade/cascade_validation.h"

#include <ATen/CPUGeneratorImpl.h>

#include "ddprun/worker/rng_fork.h"
#include "examples/cascade/drr.h"
#include "examples/frame/eval_metrics.h"
#include "examples/frame/outputs_observer.h"
#include "examples/outputs/image_panels.h"

namespace ddprun::examples {

namespace F = torch::nn::functional;

namespace {

// [r, c] resampled to [edge, edge] (nearest: voxels stay voxels) as a
// labelled tile.
outputs::FloatSlice Tile(const torch::Tensor& slice, int64_t edge,
                         const std::string& label, bool smooth = false) {
  torch::Tensor t = slice.detach().to(torch::kCPU, torch::kFloat32);
  F::InterpolateFuncOptions options;
  options.size(std::vector<int64_t>{edge, edge});
  if (smooth) {
    options.mode(torch::kBilinear).align_corners(false);
  } else {
    options.mode(torch::kNearest);
  }
  t = F::interpolate(t.unsqueeze(0).unsqueeze(0), options)
          .squeeze()
          .contiguous();
  outputs::FloatSlice s;
  s.height = s.width = static_cast<int>(edge);
  s.values.assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  s.label = label;
  return s;
}

}  // namespace

CascadeEvaluator::CascadeEvaluator(TrainerSession* session, CascadeModel model,
                                   const VDiffusion* diffusion,
                                   PatientStore* store, uint64_t seed)
    : session_(session),
      model_(std::move(model)),
      diffusion_(diffusion),
      store_(store),
      seed_(seed),
      mean_volume_(model_->num_stages()) {}

torch::Tensor CascadeEvaluator::Net(size_t k, const torch::Tensor& x_t,
                                    const torch::Tensor& t,
                                    const torch::Tensor& views,
                                    const torch::Tensor& previous) {
  torch::Tensor out;
  {
    auto autocast = session_->Autocast();
    out = model_->stage(k)->forward(x_t, t, views, previous);
  }
  return out.to(torch::kFloat32);
}

void CascadeEvaluator::ComputeMeanVolume(size_t k,
                                         const std::vector<int64_t>& train) {
  torch::NoGradGuard no_grad;
  const worker::World& world = session_->world();
  const std::vector<int64_t>& size =
      model_->stage(k)->options().stage.volume_size;
  torch::Tensor sum =
      torch::zeros({size[0] * size[1] * size[2] + 1}, torch::kFloat64);
  for (int64_t item : RankShare(world, train)) {
    const PatientSample s = ValueOrThrow(store_->Load(item));
    sum.narrow(0, 0, sum.size(0) - 1)
        .add_(ResizeVolume(s.volume, size).reshape({-1}).to(torch::kFloat64));
    sum[sum.size(0) - 1] += 1.0;
  }
  sum = sum.to(world.device());
  world.AllReduce(sum);
  const double n = std::max(1.0, sum[sum.size(0) - 1].item<double>());
  mean_volume_[k] = (sum.narrow(0, 0, sum.size(0) - 1) / n)
                        .to(torch::kFloat32)
                        .view({1, 1, size[0], size[1], size[2]});
}

torch::Tensor CascadeEvaluator::Reconstruct(const torch::Tensor& views,
                                            size_t k, int64_t item) {
  torch::Tensor previous;
  for (size_t j = 0; j <= k; ++j) {
    const std::vector<int64_t>& size =
        model_->stage(j)->options().stage.volume_size;
    const torch::Tensor noise =
        at::randn({1, 1, size[0], size[1], size[2]},
                  at::detail::createCPUGenerator(
                      worker::MixSeed({seed_, static_cast<uint64_t>(item), j, 1})),
                  torch::TensorOptions(torch::kFloat32))
            .to(views.device());
    const torch::Tensor condition =
        j > 0 ? ResizeVolume(previous, size) : torch::Tensor();
    previous = diffusion_->Sample(
        [&](const torch::Tensor& x, const torch::Tensor& t) {
          return Net(j, x, t, views, condition);
        },
        noise);
  }
  return previous;
}

nlohmann::json CascadeEvaluator::Validate(size_t k,
                                          const std::vector<int64_t>& val,
                                          const TrainSums& train) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const worker::World& world = session_->world();
  const StageConfig& stage = model_->stage(k)->options().stage;
  // psnr, ssim, psnr_mean, ssim_mean, physics of the reconstruction, of the
  // truth, val diffusion, val physics, cases, then the training sums.
  std::vector<double> s(12, 0.0);
  for (int64_t item : RankShare(world, val)) {
    const PatientSample sample = ValueOrThrow(store_->Load(item));
    torch::Tensor views = sample.views.unsqueeze(0);
    torch::Tensor full = sample.volume.unsqueeze(0);
    ToDevice(world.device(), {&views, &full});
    const torch::Tensor truth = ResizeVolume(full, stage.volume_size);
    const torch::Tensor recon = Reconstruct(views, k, item);
    const torch::Tensor& mean = mean_volume_[k];
    s[0] += Psnr(recon, truth, 2.0);
    s[1] += Ssim(recon, truth, 2.0);
    s[2] += Psnr(mean, truth, 2.0);
    s[3] += Ssim(mean, truth, 2.0);
    s[4] += PhysicsLoss(recon, views).item<double>();
    s[5] += PhysicsLoss(truth, views).item<double>();
    // The training objective on this patient, at a seeded timestep; a
    // later stage is conditioned as in training (without the noise).
    torch::Tensor previous;
    if (k > 0) {
      previous = ResizeVolume(
          ResizeVolume(full, model_->stage(k - 1)->options().stage.volume_size),
          stage.volume_size);
    }
    const VDiffusion::Noised noised = diffusion_->AddNoise(
        truth, at::detail::createCPUGenerator(
                   worker::MixSeed({seed_, static_cast<uint64_t>(item), k, 2})));
    const torch::Tensor out = Net(k, noised.x_t, noised.t, views, previous);
    s[6] += torch::mse_loss(out, noised.target).item<double>();
    s[7] +=
        PhysicsLoss(diffusion_->PredictX0(noised, out), views).item<double>();
    if (s[8] == 0 && world.is_main()) EmitImages(k, truth, recon, views);
    s[8] += 1;
  }
  s[9] = train.diffusion;
  s[10] = train.physics;
  s[11] = train.count;
  torch::Tensor sums = torch::tensor(s, torch::kFloat64).to(world.device());
  world.AllReduce(sums);
  sums = sums.cpu();
  const auto r = sums.accessor<double, 1>();
  const double n = std::max(1.0, r[8]), steps = std::max(1.0, r[11]);
  const double weight = stage.use_physics_loss ? stage.physics_weight : 0.0;
  return {{"stage", k + 1},
          {"stage_name", stage.name},
          {"volume_size", SizeText(stage.volume_size)},
          {"val_psnr", r[0] / n},
          {"val_ssim", r[1] / n},
          {"val_psnr_mean_volume", r[2] / n},
          {"val_ssim_mean_volume", r[3] / n},
          {"val_recon_physics_loss", r[4] / n},
          {"val_truth_physics_loss", r[5] / n},
          {"val_diffusion_loss", r[6] / n},
          {"val_physics_loss", r[7] / n},
          {"val_loss", (r[6] + weight * r[7]) / n},
          {"val_cases", static_cast<int64_t>(r[8])},
          {"train_diffusion_loss", r[9] / steps},
          {"train_physics_loss", r[10] / steps}};
}

void CascadeEvaluator::EmitImages(size_t k, const torch::Tensor& truth,
                                  const torch::Tensor& recon,
                                  const torch::Tensor& views) {
  const StageConfig& stage = model_->stage(k)->options().stage;
  const std::vector<int64_t>& size = stage.volume_size;
  const int64_t edge = std::max({size[0], size[1], size[2]});
  std::vector<outputs::FloatSlice> slices;
  for (const auto& [name, volume] :
       {std::pair<std::string, torch::Tensor>{"truth", truth},
        {"recon", recon}}) {
    const torch::Tensor v = volume.squeeze(0).squeeze(0);  // [D, H, W]
    slices.push_back(Tile(v[size[0] / 2], edge, name + " axial"));
    slices.push_back(Tile(v.select(1, size[1] / 2), edge, name + " coronal"));
    slices.push_back(Tile(v.select(2, size[2] / 2), edge, name + " sagittal"));
  }
  outputs::GridOptions grid;
  grid.columns = 3;
  grid.shared_range = true;
  grid.title = stage.name + " " + SizeText(size) +
               ": CT truth (top) and reconstruction from the X-rays";
  StatusOr<outputs::RasterImage> image = outputs::SliceGrid(slices, grid);
  if (image.ok())
    session_->EmitImage(stage.name + "/slices", RasterToImage(*image));

  std::vector<outputs::FloatSlice> physics;
  const int64_t side = views.size(2);
  for (int64_t v = 0; v < views.size(1); ++v) {
    physics.push_back(
        Tile(views[0][v], side, std::string(ViewName(v)) + " X-ray", true));
    physics.push_back(Tile(Drr(recon, v).squeeze(0).squeeze(0), side,
                           std::string(ViewName(v)) + " DRR of recon", true));
  }
  grid.columns = 0;
  grid.title =
      stage.name + ": input views and radiographs of the reconstruction";
  image = outputs::SliceGrid(physics, grid);
  if (image.ok())
    session_->EmitImage(stage.name + "/physics", RasterToImage(*image));
}

}  // namespace ddprun::examples
