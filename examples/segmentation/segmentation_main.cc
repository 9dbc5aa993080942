// segmentation_trainer: text-prompted 2D segmentation (PRS-Med): a UNet whose
// bottleneck is conditioned on a position prompt, Dice + BCE, data parallel.
#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/metrics.h"
#include "examples/common/train_loop.h"
#include "examples/common/trainer_cli.h"
#include "examples/common/trainer_support.h"
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

  dw::World world = InitTrainerWorld(common);
  const std::vector<SegRecord> records =
      ValueOrThrow(ReadSegJsonl(opt.data_path));
  std::vector<int64_t> train, val;
  std::tie(train, val) =
      SplitTrainVal(records.size(), opt.val_fraction, common.seed);
  if (common.debug) {
    train.resize(std::min<size_t>(train.size(), 16));
    val.resize(std::min<size_t>(val.size(), 8));
    common.epochs = 1;
  }
  std::vector<std::string> prompts;
  for (int64_t i : train) prompts.push_back(records[i].prompt);
  const Vocabulary vocab = Vocabulary::Build(prompts);
  const double lr =
      dw::ScaleLearningRate(opt.learning_rate, world.world_size(),
                            opt.no_lr_scaling ? "none" : "linear");
  const int num_workers =
      AutoNumWorkers(common.num_workers, world.local_world_size());
  dw::LogMain(world, "segmentation: " + std::to_string(train.size()) +
                         " train / " + std::to_string(val.size()) +
                         " val images, vocabulary " +
                         std::to_string(vocab.size()) + ", world " +
                         std::to_string(world.world_size()) + ", batch " +
                         std::to_string(opt.batch_size) + " per rank, lr " +
                         std::to_string(lr));

  PromptUNetOptions model_options;
  model_options.vocab_size = vocab.size();
  model_options.width = opt.width;
  PromptUNet model(model_options);
  model->to(world.device());  // before the optimizer takes its parameters
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(lr));
  dw::Checkpointer checkpointer(
      world, {common.output_dir + "/checkpoints", common.checkpoint_every, 2});
  dw::CheckpointParts parts;
  parts.model = model.ptr().get();
  parts.optimizer = &optimizer;
  dw::TrainState state =
      ResumeOrStart(world, &checkpointer, parts, common.resume_from);
  dw::DistributedDataParallel ddp(world, model.ptr());

  TrainLoop::Config loop_config;
  loop_config.dataset_size = static_cast<int64_t>(train.size());
  loop_config.batch_per_rank = opt.batch_size;
  loop_config.samples_per_step = opt.batch_size * world.world_size();
  TrainLoop loop(world, common, loop_config, &checkpointer, parts, &state);

  auto load = [&](const std::vector<int64_t>& positions) {
    std::vector<int64_t> items;
    for (int64_t p : positions) items.push_back(train[p]);
    return LoadBatch(records, vocab, opt, items);
  };
  auto step = [&](Batch& batch) {
    ToDevice(world.device(), {&batch.images, &batch.masks, &batch.tokens});
    model->train();
    torch::Tensor logits;
    {
      dw::AutocastScope autocast(common.amp, world.device());
      logits = model->forward(batch.images, batch.tokens);
    }
    torch::Tensor loss = DiceBceLoss(logits, batch.masks, opt.dice_weight);
    optimizer.zero_grad();
    ddp.Backward(loss);
    optimizer.step();
    return loss.item<double>();
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
        dw::AutocastScope autocast(common.amp, world.device());
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
  loop.Run<Batch>(nullptr, load, step, validate, num_workers);
  dw::LogMain(world,
              "done: step " + std::to_string(state.step) + ", val Dice " +
                  std::to_string(loop.last_metrics().value("val_dice", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
