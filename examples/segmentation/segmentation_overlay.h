#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// The picture of what the segmentation model produces: each image in gray
// with its predicted mask (probability > 0.5) filled in red and its true
// mask outlined in green (outputs::MaskOverlayGrid), labelled with
// `labels[i]` (e.g. the prompt), `columns` per row, under `title`.
// images, probabilities, masks: [N, 1, H, W] (or [N, H, W]), any device.
// Returns the picture as a CPU float tensor [3, H', W'] in [0, 1], what
// TrainerSession::EmitImage takes. INVALID_ARGUMENT for no images, shapes
// that differ, or labels that do not match N.
StatusOr<torch::Tensor> MaskOverlayPicture(
    const torch::Tensor& images, const torch::Tensor& probabilities,
    const torch::Tensor& masks, const std::vector<std::string>& labels,
    const std::string& title, int columns);

}  // namespace ddprun::examples
