#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace ddprun::examples {

// The X-ray views of a patient, in order. A volume is [..., D, H, W] (NIfTI
// k, j, i); a view is a parallel-beam projection through it:
//   view 0, frontal (PA): along H, an image of D rows x W columns;
//   view 1, lateral:      along W, an image of D rows x H columns.
// Row r of a view is slice d = r of the volume.
constexpr int64_t kMaxViews = 2;
const char* ViewName(int64_t view);  // "frontal", "lateral"

// Optical depth of a path straight through water (HU 0) across the whole
// volume: fixes the contrast of the radiographs (1 - e^-2 = 0.86 for a
// volume full of water).
constexpr double kOpticalDepth = 4.0;

// Digitally reconstructed radiograph of `volume` (values in [-1, 1], the
// HU window mapped linearly: -1 = air, +1 = the window's top) along
// `view`: Beer-Lambert over the attenuation a = (v + 1) / 2, which is
// proportional to 1 + HU / 1000 for the default window [-1000, 1000]:
//   I = 1 - exp(-kOpticalDepth * mean(a along the beam)),
// bright where the beam crossed dense tissue, in [0, 1 - e^-4]. The mean
// (not the sum) makes a view independent of the volume's resolution.
// Differentiable. [..., D, H, W] -> [..., D, W] or [..., D, H].
torch::Tensor Drr(const torch::Tensor& volume, int64_t view);

// `views` ([B, V, S, S], in [0, 1]) resampled to the shape of each
// projection of a volume of `volume_size` (D, H, W) by area averaging (a
// radiograph is an average over its pixels): view v as [B, rows, cols].
torch::Tensor ViewAtVolumeSize(const torch::Tensor& views, int64_t view,
                               const std::vector<int64_t>& volume_size);

// Unfiltered back-projection of each view into a volume of `volume_size`:
// the Beer-Lambert inverse of a view pixel (its beam's mean attenuation,
// -ln(1 - I) / kOpticalDepth) spread evenly along the beam, as a volume
// value in [-1, 1]. For a patient whose tissue were uniform along every
// beam this is the volume itself; otherwise it is where each view puts the
// tissue, which the cascade's stages take as input channels so that they
// start from the X-ray geometry instead of learning it. `views` [B, V, S,
// S] in [0, 1] -> [B, V, D, H, W], float32, differentiable.
torch::Tensor BackProjection(const torch::Tensor& views,
                             const std::vector<int64_t>& volume_size);

// The guide's physics loss: how far the projections of `volume` ([B, 1, D,
// H, W] in [-1, 1]) are from the X-ray views the patient came with
// ([B, V, S, S] in [0, 1]): the mean over views of the MSE between Drr and
// the view at the projection's size. 0 for the true volume of a synthetic
// patient up to 8-bit quantisation and resampling. float32: per sample
// ([B]) when `per_sample`, else the batch mean (a scalar).
torch::Tensor PhysicsLoss(const torch::Tensor& volume,
                          const torch::Tensor& views, bool per_sample = false);

}  // namespace ddprun::examples
