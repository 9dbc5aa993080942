#include "examples/segmentation/segmentation_overlay.h"

#include <torch/torch.h>

#include "examples/frame/outputs_observer.h"
#include "examples/outputs/image_panels.h"

namespace ddprun::examples {
namespace {

// [N, H, W] float32 on the CPU, contiguous.
torch::Tensor Planes(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32);
  if (c.dim() == 4) c = c.select(1, 0);
  return c.contiguous();
}

outputs::FloatSlice Slice(const torch::Tensor& plane,
                          const std::string& label) {
  outputs::FloatSlice s;
  s.height = static_cast<int>(plane.size(0));
  s.width = static_cast<int>(plane.size(1));
  const float* p = plane.data_ptr<float>();
  s.values.assign(p, p + plane.numel());
  s.label = label;
  return s;
}

}  // namespace

StatusOr<torch::Tensor> MaskOverlayPicture(
    const torch::Tensor& images, const torch::Tensor& probabilities,
    const torch::Tensor& masks, const std::vector<std::string>& labels,
    const std::string& title, int columns) {
  if (!images.defined() || images.dim() < 3 || images.size(0) == 0) {
    return InvalidArgumentError("no images to overlay");
  }
  if (!probabilities.defined() || !masks.defined() ||
      !probabilities.sizes().equals(images.sizes()) ||
      !masks.sizes().equals(images.sizes()) ||
      (images.dim() == 4 && images.size(1) != 1) || images.dim() > 4) {
    return InvalidArgumentError(
        "images, probabilities and masks must all be [N, 1, H, W] or "
        "[N, H, W] of one shape");
  }
  const torch::Tensor im = Planes(images), pr = Planes(probabilities),
                      ms = Planes(masks);
  if (labels.size() != static_cast<size_t>(im.size(0))) {
    return InvalidArgumentError(std::to_string(labels.size()) + " labels for " +
                                std::to_string(im.size(0)) + " images");
  }
  std::vector<outputs::OverlayCase> cases;
  for (int64_t i = 0; i < im.size(0); ++i) {
    cases.push_back(
        {Slice(im[i], labels[i]), Slice(pr[i], ""), Slice(ms[i], "")});
  }
  outputs::GridOptions options;
  options.title = title;
  options.columns = columns;
  DDP_ASSIGN_OR_RETURN(outputs::RasterImage raster,
                       outputs::MaskOverlayGrid(cases, options));
  torch::Tensor chw = RasterToImage(raster);
  if (chw.size(0) == 1) chw = chw.expand({3, -1, -1});
  return chw.contiguous();
}

}  // namespace ddprun::examples
