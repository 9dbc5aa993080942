// segmentation_trainer: text-prompted 2D segmentation (PRS-Med): a UNet whose
// bottleneck is conditioned on a position prompt, Dice + BCE, data parallel.
#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/metrics.h"
#include "examples/common/trainer_session.h"
#include "examples/common/vocabulary.h"
#include "examples/segmentation/prompt_unet.h"
#include "examples/segmentation/seg_data.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

struct SegOptions {
  std::string data_path;  // prompts JSONL
  double val_fraction = 0.2;
  int64_t image_size = 64;
  int64_t width = 8;
  int64_t batch_size = 8;  // per rank (per GPU)
  double learning_rate = 1e-3;
  bool no_lr_scaling = false;
  double dice_weight = 1.0;
  int64_t prompt_length = 12;
};

struct Batch {
  torch::Tensor images;  // [B,1,S,S]
  torch::Tensor masks;   // [B,1,S,S]
  torch::Tensor tokens;  // [B,L]
};

StatusOr<Batch> LoadBatch(const std::vector<SegRecord>& records,
                          const Vocabulary& vocab, const SegOptions& opt,
                          const std::vector<int64_t>& items) {
  std::vector<torch::Tensor> images, masks, tokens;
  for (int64_t item : items) {
    DDP_ASSIGN_OR_RETURN(SegSample s,
                         AtRow(records[item].where,
                               LoadSegSample(records[item], opt.image_size)));
    images.push_back(s.image);
    masks.push_back(s.mask);
    tokens.push_back(
        torch::tensor(vocab.Encode(records[item].prompt, opt.prompt_length)));
  }
  return Batch{torch::stack(images), torch::stack(masks), torch::stack(tokens)};
}

// Soft Dice loss (1 - Dice of probabilities) plus BCE on logits.
torch::Tensor DiceBceLoss(const torch::Tensor& logits,
                          const torch::Tensor& target, double dice_weight) {
  torch::Tensor l = logits.to(torch::kFloat32);
  torch::Tensor bce = torch::binary_cross_entropy_with_logits(l, target);
  torch::Tensor p = torch::sigmoid(l);
  torch::Tensor inter = (p * target).sum({1, 2, 3});
  torch::Tensor total = p.sum({1, 2, 3}) + target.sum({1, 2, 3});
  torch::Tensor dice = (2 * inter + 1) / (total + 1);
  return bce + dice_weight * (1 - dice).mean();
}

int Train(int argc, char** argv) {
  SegOptions opt;
  TrainerCli cli(
      "segmentation_trainer: text-prompted 2D segmentation (UNet with a "
      "prompt-conditioned bottleneck) on PNG/JPEG images + masks listed in a "
      "JSONL {image, mask, prompt}. Runs alone or under ddprun/torchrun.",
      {"runs/segmentation", /*epochs=*/8, /*synthetic_n=*/192});
  CLI::App& app = cli.app();
  CommonOptions& common = cli.common();
  cli.AddDataOptions("--data_path", &opt.data_path,
                     "JSONL with one {image, mask, prompt} object per line",
                     &opt.val_fraction);
  app.add_option(
         "--image_size", opt.image_size,
         "Images and masks are resized to this square size (multiple of 8)")
      ->check(CLI::PositiveNumber);
  app.add_option("--width", opt.width, "UNet channels of the first level")
      ->check(CLI::PositiveNumber);
  cli.AddBatchSize(&opt.batch_size, "Batch PER RANK (per GPU)");
  app.add_option("--learning_rate", opt.learning_rate,
                 "Base Adam learning rate, multiplied by the world size");
  app.add_flag("--no_lr_scaling", opt.no_lr_scaling,
               "Use --learning_rate as is, not scaled by the world size");
  app.add_option("--dice_weight", opt.dice_weight,
                 "Weight of the Dice term next to BCE");
  app.add_option("--prompt_length", opt.prompt_length,
                 "Prompt tokens kept (padded/cut)");
  if (auto code = cli.Parse(argc, argv)) return *code;
  if (opt.image_size % 8 != 0)
    throw dw::ConfigError("--image_size must be a multiple of 8");
  if (cli.MakeSynthetic(
          [&] {
            return WriteSyntheticSegmentation(common.make_synthetic,
                                              common.synthetic_n,
                                              opt.image_size, common.seed);
          },
          "images", "prompts.jsonl")) {
    return 0;
  }
  TrainerCli::Require("--data_path", opt.data_path);

  TrainerSession session(cli);
  const dw::World& world = session.world();
  const std::vector<SegRecord> records =
      ValueOrThrow(ReadSegJsonl(opt.data_path));
  auto [train, val] =
      session.Split(records.size(), opt.val_fraction, opt.data_path, 16, 8);
  std::vector<std::string> prompts;
  for (int64_t i : train) prompts.push_back(records[i].prompt);
  const Vocabulary vocab = Vocabulary::Build(prompts);
  const double lr =
      dw::ScaleLearningRate(opt.learning_rate, world.world_size(),
                            opt.no_lr_scaling ? "none" : "linear");
  const int64_t accum = common.gradient_accumulation_steps;
  session.LogMain(
      "segmentation: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val images, vocabulary " +
      std::to_string(vocab.size()) + ", world " +
      std::to_string(world.world_size()) + ", batch " +
      std::to_string(opt.batch_size) + " per rank" +
      (accum > 1 ? " x accumulation " + std::to_string(accum) : "") + ", lr " +
      std::to_string(lr) + ", " + session.precision().description);

  PromptUNetOptions model_options;
  model_options.vocab_size = vocab.size();
  model_options.width = opt.width;
  PromptUNet model(model_options);
  session.PlaceOnDevice(*model);
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(lr));
  session.Prepare({model.ptr(), &optimizer});

  LoopConfig loop;
  loop.dataset_size = static_cast<int64_t>(train.size());
  loop.micro_batch = opt.batch_size;
  loop.accumulation = accum;
  loop.best = {"val_dice", /*higher_is_better=*/true};

  auto load = [&](const std::vector<int64_t>& positions) {
    std::vector<int64_t> items;
    for (int64_t p : positions) items.push_back(train[p]);
    return LoadBatch(records, vocab, opt, items);
  };
  auto step = [&](std::vector<Batch>& micro) {
    model->train();
    return session.Step(micro.size(), [&](int64_t m) {
      Batch& b = micro[m];
      ToDevice(world.device(), {&b.images, &b.masks, &b.tokens});
      torch::Tensor logits;
      {
        auto autocast = session.Autocast();
        logits = model->forward(b.images, b.tokens);
      }
      return DiceBceLoss(logits, b.masks, opt.dice_weight);
    });
  };
  // Loss weighted by samples and Dice sums are reduced over ranks, so the
  // numbers cover the whole validation set exactly once.
  auto validate = [&](int64_t) -> nlohmann::json {
    torch::NoGradGuard no_grad;
    model->eval();
    double loss_sum = 0, count = 0, inter = 0, total = 0;
    for (const auto& items :
         MakeBatches(RankShare(world, val), opt.batch_size, false)) {
      Batch b = ValueOrThrow(LoadBatch(records, vocab, opt, items));
      ToDevice(world.device(), {&b.images, &b.masks, &b.tokens});
      torch::Tensor logits;
      {
        auto autocast = session.Autocast();
        logits = model->forward(b.images, b.tokens).to(torch::kFloat32);
      }
      loss_sum += DiceBceLoss(logits, b.masks, opt.dice_weight).item<double>() *
                  items.size();
      count += items.size();
      auto [i, t] = DiceSums(torch::sigmoid(logits), b.masks);
      inter += i;
      total += t;
    }
    torch::Tensor sums =
        torch::tensor({loss_sum, count, inter, total}, torch::kFloat64)
            .to(world.device());
    world.AllReduce(sums);
    sums = sums.cpu();
    auto s = sums.accessor<double, 1>();
    return {{"val_loss", s[1] > 0 ? s[0] / s[1] : 0.0},
            {"val_dice", DiceFromSums(s[2], s[3])},
            {"val_images", static_cast<int64_t>(s[1])}};
  };
  session.Run<Batch>(loop, {nullptr, load, step, validate});
  session.Done("val Dice " +
               std::to_string(session.last_metrics().value("val_dice", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
