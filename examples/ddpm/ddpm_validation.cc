#include "examples/ddpm/ddpm_validation.h"

#include <stdexcept>

#include <torch/torch.h>

#include "examples/ddpm/ddpm_data.h"
#include "examples/frame/eval_metrics.h"
#include "examples/frame/nifti_io.h"
#include "examples/frame/outputs_observer.h"
#include "examples/frame/trainer_support.h"
#include "examples/outputs/image_panels.h"

namespace ddprun::examples {
namespace {

outputs::FloatSlice MiddleSlice(const torch::Tensor& volume,
                                const std::string& label) {
  // [D, H, W] -> the middle axial slice [H, W].
  torch::Tensor s = volume.select(0, volume.size(0) / 2)
                        .to(torch::kCPU, torch::kFloat32)
                        .contiguous();
  outputs::FloatSlice slice;
  slice.height = static_cast<int>(s.size(0));
  slice.width = static_cast<int>(s.size(1));
  slice.values.assign(s.data_ptr<float>(), s.data_ptr<float>() + s.numel());
  slice.label = label;
  return slice;
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> SplitTarget(
    const torch::Tensor& volumes, int64_t target) {
  std::vector<int64_t> cond;
  for (int64_t c = 0; c < kBratsModalities; ++c) {
    if (c != target) cond.push_back(c);
  }
  // The index lives where the volumes do (index_select wants both on one
  // device).
  return {volumes.narrow(1, target, 1),
          volumes.index_select(1, torch::tensor(cond).to(volumes.device()))};
}

torch::Tensor SamplePanel(const std::vector<SampleCase>& cases, int64_t target,
                          const std::string& title) {
  if (cases.empty()) throw std::invalid_argument("SamplePanel: no cases");
  const auto& names = BratsModalityNames();
  std::vector<outputs::FloatSlice> slices;
  for (const SampleCase& c : cases) {
    for (int64_t m = 0; m < kBratsModalities; ++m) {
      if (m != target) slices.push_back(MiddleSlice(c.volume[0][m], names[m]));
    }
    slices.push_back(MiddleSlice(c.sample[0][0], names[target] + " sample"));
    slices.push_back(
        MiddleSlice(c.volume[0][target], names[target] + " truth"));
  }
  outputs::GridOptions options;
  options.title = title;
  options.columns = static_cast<int>(kBratsModalities + 1);
  options.shared_range = true;
  outputs::RasterImage raster =
      ValueOrThrow(outputs::SliceGrid(slices, options));
  return RasterToImage(raster);
}

ValidationResult Validate(const ValidationSetup& setup,
                          const std::vector<int64_t>& items, int64_t epoch,
                          int64_t size) {
  const worker::World& world = setup.world;
  ValidationResult result;
  double psnr = 0, ssim = 0, baseline = 0, ssim_baseline = 0, count = 0;
  for (int64_t item : items) {
    torch::Tensor v = setup.load(item).unsqueeze(0);
    ToDevice(world.device(), {&v});
    auto [target, cond] = SplitTarget(v, setup.target_modality);
    torch::Tensor sample = setup.ddpm->Sample(
        [&](const torch::Tensor& x, const torch::Tensor& t) {
          return setup.net(x, t, cond);
        },
        target.sizes(), target.options());
    psnr += Psnr(sample, target, 2.0);
    ssim += Ssim(sample, target, 2.0);
    const torch::Tensor constant = torch::zeros_like(target) + target.mean();
    baseline += Psnr(constant, target, 2.0);
    ssim_baseline += Ssim(constant, target, 2.0);
    if (world.is_main()) {
      if (count == 0 && !setup.samples_dir.empty()) {
        OkOrThrow(WriteNifti(setup.samples_dir + "/epoch" +
                                 std::to_string(epoch + 1) + "_size" +
                                 std::to_string(size) + ".nii",
                             torch::cat({sample, target}, 1).squeeze(0).cpu()));
      }
      if (static_cast<int64_t>(result.panel.size()) < setup.panel_cases)
        result.panel.push_back({v.cpu(), sample.cpu()});
    }
    count += 1;
  }
  torch::Tensor sums =
      torch::tensor({psnr, ssim, baseline, count, ssim_baseline},
                    torch::kFloat64)
          .to(world.device());
  world.AllReduce(sums);
  sums = sums.cpu();
  auto s = sums.accessor<double, 1>();
  const double n = std::max(1.0, s[3]);
  result.record = {{"val_psnr", s[0] / n},
                   {"val_ssim", s[1] / n},
                   {"val_psnr_constant", s[2] / n},
                   {"val_ssim_constant", s[4] / n},
                   {"val_cases", static_cast<int64_t>(s[3])}};
  return result;
}

}  // namespace ddprun::examples
