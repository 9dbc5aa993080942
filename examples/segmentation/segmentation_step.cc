#include "examples/segmentation/segmentation_step.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "examples/frame/batch_loader.h"
#include "examples/frame/eval_metrics.h"
#include "examples/frame/trainer_support.h"
#include "examples/segmentation/segmentation_overlay.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

// Validation images rank 0 shows in the mask overlay picture.
constexpr int64_t kOverlayImages = 8;

// The first kOverlayImages validation images of the main rank, on the CPU.
struct Overlay {
  SegBatch shown;
  torch::Tensor probs;
  std::vector<std::string> prompts;

  void Keep(const SegBatch& b, const torch::Tensor& p,
            const std::vector<SegRecord>& records,
            const std::vector<int64_t>& items) {
    if (static_cast<int64_t>(prompts.size()) >= kOverlayImages) return;
    const int64_t take = std::min<int64_t>(
        kOverlayImages - static_cast<int64_t>(prompts.size()),
        static_cast<int64_t>(items.size()));
    auto keep = [&](torch::Tensor& to, const torch::Tensor& from) {
      torch::Tensor part = from.slice(0, 0, take).to(torch::kCPU);
      to = to.defined() ? torch::cat({to, part}) : part;
    };
    keep(shown.images, b.images);
    keep(shown.masks, b.masks);
    keep(probs, p);
    for (int64_t k = 0; k < take; ++k) prompts.push_back(records[items[k]].prompt);
  }

  void Emit(TrainerSession& session, int64_t epoch, double dice) const {
    if (prompts.empty()) return;
    char title[96];
    std::snprintf(title, sizeof(title), "epoch %lld, val Dice %.3f",
                  static_cast<long long>(epoch + 1), dice);
    StatusOr<torch::Tensor> picture = MaskOverlayPicture(
        shown.images, probs, shown.masks, prompts, title, /*columns=*/4);
    if (picture.ok()) {
      session.EmitImage("val/mask_overlay", *picture);
    } else {
      session.LogMain("warning: no mask overlay: " +
                      picture.status().message());
    }
  }
};

}  // namespace

double SegmentationTrainStep(TrainerSession& session, PromptUNet& model,
                             const SegOptions& opt,
                             std::vector<SegBatch>& micro) {
  model->train();
  return session.Step(micro.size(), [&](int64_t m) {
    SegBatch& b = micro[m];
    ToDevice(session.world().device(), {&b.images, &b.masks, &b.tokens});
    return SegmentationLoss(model, b, opt.dice_weight,
                            [&] { return session.Autocast(); });
  });
}

nlohmann::json ValidateSegmentation(TrainerSession& session, PromptUNet& model,
                                    const SegOptions& opt,
                                    const std::vector<SegRecord>& records,
                                    const Vocabulary& vocab,
                                    const std::vector<int64_t>& val,
                                    int64_t epoch) {
  torch::NoGradGuard no_grad;
  model->eval();
  const dw::World& world = session.world();
  double loss_sum = 0, count = 0, inter = 0, total = 0;
  Overlay overlay;
  for (const auto& items :
       MakeBatches(RankShare(world, val), opt.batch_size, false)) {
    SegBatch b = ValueOrThrow(LoadSegBatch(records, vocab, opt, items));
    ToDevice(world.device(), {&b.images, &b.masks, &b.tokens});
    torch::Tensor logits;
    {
      auto autocast = session.Autocast();
      logits = model->forward(b.images, b.tokens).to(torch::kFloat32);
    }
    loss_sum += DiceBceLoss(logits, b.masks, opt.dice_weight).item<double>() *
                items.size();
    count += items.size();
    torch::Tensor probs = torch::sigmoid(logits);
    auto [i, t] = DiceSums(probs, b.masks);
    inter += i;
    total += t;
    if (world.is_main()) overlay.Keep(b, probs, records, items);
  }
  torch::Tensor sums =
      torch::tensor({loss_sum, count, inter, total}, torch::kFloat64)
          .to(world.device());
  world.AllReduce(sums);
  sums = sums.cpu();
  auto s = sums.accessor<double, 1>();
  const double dice = DiceFromSums(s[2], s[3]);
  overlay.Emit(session, epoch, dice);
  return {{"val_loss", s[1] > 0 ? s[0] / s[1] : 0.0},
          {"val_dice", dice},
          {"val_images", static_cast<int64_t>(s[1])}};
}

}  // namespace ddprun::examples
