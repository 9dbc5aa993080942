// segmentation_trainer: text-prompted 2D segmentation (PRS-Med): a UNet whose
// bottleneck is conditioned on a position prompt, Dice + BCE, data parallel.
#include <algorithm>
#include <cstdio>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/metrics.h"
#include "examples/common/trainer_session.h"
#include "examples/common/vocabulary.h"
#include "examples/segmentation/prompt_unet.h"
#include "examples/segmentation/prs_med_layout.h"
#include "examples/segmentation/seg_data.h"
#include "examples/segmentation/seg_overlay.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

// Validation images rank 0 shows in the mask overlay picture.
constexpr int64_t kOverlayImages = 8;

struct SegOptions {
  std::string data_path;  // prompts JSONL or the guide's data root
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

// Train and validation positions in `records`: the split column where the
// data has one (the guide's annotations; test rows are left out, rows
// without a split train), else a seeded --val_fraction split. Without any
// val row, --val_fraction of the training rows is held out.
std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitRecords(
    TrainerSession& session, const std::vector<SegRecord>& records,
    const SegOptions& opt) {
  std::vector<int64_t> train, val;
  int64_t test = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string& split = records[i].split;
    if (split == "val") {
      val.push_back(static_cast<int64_t>(i));
    } else if (split == "test") {
      ++test;
    } else {
      train.push_back(static_cast<int64_t>(i));
    }
  }
  if (std::all_of(records.begin(), records.end(),
                  [](const SegRecord& r) { return r.split.empty(); })) {
    return session.Split(records.size(), opt.val_fraction, opt.data_path, 16,
                         8);
  }
  std::string how = "split column: " + std::to_string(train.size()) +
                    " train, " + std::to_string(val.size()) + " val, " +
                    std::to_string(test) + " test rows (test rows unused)";
  if (val.empty() && train.size() > 1) {
    auto [t, v] = SplitTrainVal(static_cast<int64_t>(train.size()),
                                opt.val_fraction, session.common().seed);
    std::vector<int64_t> kept, held;
    for (int64_t p : t) kept.push_back(train[p]);
    for (int64_t p : v) held.push_back(train[p]);
    train = std::move(kept);
    val = std::move(held);
    how += "; no val rows, so --val_fraction " +
           std::to_string(opt.val_fraction) + " of the train rows validate";
  }
  session.LogMain("segmentation data: " + how);
  return session.Split(std::move(train), std::move(val), opt.data_path, 16, 8);
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
      "prompt-conditioned bottleneck) on PNG/JPEG images + masks: the "
      "guide's data root (annotations/*.csv, images_and_masks/) or a JSONL "
      "{image, mask, prompt}. Runs alone or under ddprun/torchrun.",
      {"runs/segmentation", /*epochs=*/8, /*synthetic_n=*/192});
  CLI::App& app = cli.app();
  CommonOptions& common = cli.common();
  cli.AddDataOptions(
      "--data_path", &opt.data_path,
      "The data: the guide's data root (DIR with annotations/*.csv and "
      "images_and_masks/; also --data_root), or a JSONL with one {image, "
      "mask, prompt} object per line (or a DIR holding prompts.jsonl)",
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
  // prs-med-segmentation.md's train_prs_med.py names.
  cli.AddAliases({{"data_root", "data_path", ""},
                  {"grad_accum_steps", "gradient_accumulation_steps", ""}});
  cli.AddForeignFlags(
      {{"dist_url", ForeignFlag::Arity::kOne,
        "the process group is set up from the launcher's environment "
        "(MASTER_ADDR, MASTER_PORT or ddprun's rendezvous), like env://"}});
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
    std::printf(
        "the same images in the guide's layout: --data_root %s "
        "(annotations/lesions.csv, images_and_masks/lesions/)\n",
        common.make_synthetic.c_str());
    return 0;
  }
  TrainerCli::Require("--data_path", opt.data_path);

  TrainerSession session(cli);
  const dw::World& world = session.world();
  const std::vector<SegRecord> records =
      ValueOrThrow(ReadSegData(opt.data_path));
  auto [train, val] = SplitRecords(session, records, opt);
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
      std::to_string(lr) +
      (opt.no_lr_scaling ? " (not scaled)"
                         : " (--learning_rate x world " +
                               std::to_string(world.world_size()) + ")") +
      ", effective batch " +
      std::to_string(opt.batch_size * accum * world.world_size()) + ", " +
      session.precision().description);

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
  // numbers cover the whole validation set exactly once. Rank 0 keeps its
  // first validation images for the overlay picture.
  auto validate = [&](int64_t epoch) -> nlohmann::json {
    torch::NoGradGuard no_grad;
    model->eval();
    double loss_sum = 0, count = 0, inter = 0, total = 0;
    Batch shown;
    torch::Tensor shown_probs;
    std::vector<std::string> shown_prompts;
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
      torch::Tensor probs = torch::sigmoid(logits);
      auto [i, t] = DiceSums(probs, b.masks);
      inter += i;
      total += t;
      if (world.is_main() &&
          static_cast<int64_t>(shown_prompts.size()) < kOverlayImages) {
        const int64_t take = std::min<int64_t>(
            kOverlayImages - static_cast<int64_t>(shown_prompts.size()),
            static_cast<int64_t>(items.size()));
        auto keep = [&](torch::Tensor& to, const torch::Tensor& from) {
          torch::Tensor part = from.slice(0, 0, take).to(torch::kCPU);
          to = to.defined() ? torch::cat({to, part}) : part;
        };
        keep(shown.images, b.images);
        keep(shown.masks, b.masks);
        keep(shown_probs, probs);
        for (int64_t k = 0; k < take; ++k)
          shown_prompts.push_back(records[items[k]].prompt);
      }
    }
    torch::Tensor sums =
        torch::tensor({loss_sum, count, inter, total}, torch::kFloat64)
            .to(world.device());
    world.AllReduce(sums);
    sums = sums.cpu();
    auto s = sums.accessor<double, 1>();
    const double dice = DiceFromSums(s[2], s[3]);
    if (!shown_prompts.empty()) {
      char title[96];
      std::snprintf(title, sizeof(title), "epoch %lld, val Dice %.3f",
                    static_cast<long long>(epoch + 1), dice);
      StatusOr<torch::Tensor> picture =
          MaskOverlayPicture(shown.images, shown_probs, shown.masks,
                             shown_prompts, title, /*columns=*/4);
      if (picture.ok()) {
        session.EmitImage("val/mask_overlay", *picture);
      } else {
        session.LogMain("warning: no mask overlay: " +
                        picture.status().message());
      }
    }
    return {{"val_loss", s[1] > 0 ? s[0] / s[1] : 0.0},
            {"val_dice", dice},
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
