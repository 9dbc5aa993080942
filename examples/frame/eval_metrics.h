#pragma once

#include <vector>

#include <torch/types.h>

namespace ddprun::examples {

// Harrell's concordance index. A pair (i, j) is comparable when
// time[i] < time[j] and event[i] is set; it is concordant when risk[i] >
// risk[j]; equal risks count 1/2. Pairs with equal times are not comparable.
// Returns 0.5 when no pair is comparable. O(n^2), fine for validation sets.
double ConcordanceIndex(const std::vector<double>& risk,
                        const std::vector<double>& time,
                        const std::vector<double>& event);

// Area under the ROC curve of `score` against binary `label` (ties in score
// share rank, Mann-Whitney). Returns NaN when only one class is present.
double Auroc(const std::vector<double>& score,
             const std::vector<double>& label);

// Mean AUROC over the columns of `scores`/`labels` ([N, K]); entries whose
// `mask` is 0 are left out; columns with a single class are skipped. NaN when
// no column qualifies.
double MeanAuroc(const torch::Tensor& scores, const torch::Tensor& labels,
                 const torch::Tensor& mask);

// Dice sums of binarized predictions (prob > 0.5) against binary targets:
// returns {intersection, |pred| + |target|}; sums add across batches/ranks,
// Dice = 2 * intersection / sum (1 when both are empty).
std::pair<double, double> DiceSums(const torch::Tensor& probs,
                                   const torch::Tensor& target);
double DiceFromSums(double intersection, double total);

// Peak signal-to-noise ratio in dB for values spanning `data_range`.
double Psnr(const torch::Tensor& prediction, const torch::Tensor& target,
            double data_range);

// Structural similarity of two volumes or images ([..., D, H, W] or
// [..., H, W]; leading dims are flattened into a batch), 7-wide uniform
// window, constants K1=0.01, K2=0.03 of `data_range`.
double Ssim(const torch::Tensor& prediction, const torch::Tensor& target,
            double data_range);

}  // namespace ddprun::examples
