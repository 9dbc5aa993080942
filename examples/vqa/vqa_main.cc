// vqa_trainer: chest X-ray visual question answering (MIMIC-CXR VQA style)
// with a 14-label CheXpert head, data parallel, optional ZeRO sharding.
#include <cmath>
#include <cstdio>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/common/image_io.h"
#include "examples/common/metrics.h"
#include "examples/common/norm_layer.h"
#include "examples/common/trainer_session.h"
#include "examples/common/vocabulary.h"
#include "examples/vqa/vqa_data.h"
#include "examples/vqa/vqa_guide.h"
#include "examples/vqa/vqa_mimic.h"
#include "examples/vqa/vqa_model.h"
#include "examples/vqa/vqa_report.h"
#include "examples/vqa/vqa_synthetic.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

struct VqaOptions {
  std::string data_path;
  std::string mimic_qa_path;  // "" = the data root
  double val_fraction = 0.2;
  int64_t image_size = 64;
  int64_t width = 16;
  std::string norm = "group";
  bool sync_batchnorm = false;
  VqaGuideSettings guide;  // batch, ZeRO, offload, --auto_optimize
  double learning_rate = 2e-3;
  double label_weight = 1.0;
  std::string uncertain_policy = "ignore";
  int64_t question_length = 12;
  std::string synthetic_format = "png";
  std::string synthetic_layout = "jsonl";
};

// "7 answers (0, 1, 2, 3, 4, no, yes)": at most 10 are named.
std::string DescribeAnswers(const LabelSet& answers) {
  std::string text = std::to_string(answers.size()) + " answers (";
  for (int64_t i = 0; i < answers.size() && i < 10; ++i)
    text += (i ? ", " : "") + answers.Label(i);
  return text + (answers.size() > 10 ? ", ...)" : ")");
}

// What the policy did: "uncertain (-1) labels: 448, policy ignore (masked
// out of loss and AUROC)".
std::string DescribeUncertain(const std::vector<VqaRecord>& records,
                              const std::string& policy) {
  int64_t n = 0;
  for (const VqaRecord& r : records) n += r.uncertain;
  const std::string effect = policy == "ignore" ? "masked out of loss and AUROC"
                             : policy == "zeros" ? "trained as negative"
                                                 : "trained as positive";
  return "uncertain (-1) labels: " + std::to_string(n) + ", policy " + policy +
         " (" + effect + ")";
}

// "optimizer state: 1.2 MB per rank on the device, 0 in host memory
// (ZeRO-2 shard of 2, ...)": what --zero and --offload_optimizer keep where.
std::string DescribeOptimizerState(torch::nn::Module& model,
                                   const dw::ShardedAdam* sharded) {
  int64_t numel = 0;
  for (const auto& p : model.parameters()) numel += p.numel();
  auto mb = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f MB", bytes / 1e6);
    return std::string(text);
  };
  const int64_t full = 2 * 4 * numel;  // exp_avg + exp_avg_sq, float32
  const int64_t device = sharded ? sharded->device_state_bytes() : full;
  const int64_t host = sharded ? sharded->state_bytes() - device : 0;
  return "optimizer state (Adam exp_avg + exp_avg_sq of " +
         std::to_string(numel) + " parameters): " + mb(device) +
         " per rank beside the parameters, " + mb(host) +
         " offloaded to host memory (unsharded: " + mb(full) + ")";
}

// The per-label AUROC bar chart of a validation (rank 0), as the image
// val/label_auroc; a chart that cannot be drawn is a warning, not a stop.
void EmitAurocChart(TrainerSession& session, const std::vector<double>& aurocs,
                    int64_t epoch, double mean) {
  char title[96];
  std::snprintf(title, sizeof(title),
                "vqa: CheXpert AUROC per label, epoch %lld (mean %.3f)",
                static_cast<long long>(epoch + 1), mean);
  StatusOr<torch::Tensor> chart = AurocChart(aurocs, title);
  if (chart.ok()) {
    session.EmitImage("val/label_auroc", *chart);
  } else {
    session.LogMain("warning: no AUROC chart: " + chart.status().message());
  }
}

struct Batch {
  torch::Tensor images, tokens, answers, labels, mask;
};

int Train(int argc, char** argv) {
  VqaOptions opt;
  TrainerCli cli(
      "vqa_trainer: chest X-ray VQA (CNN image encoder + GRU question "
      "encoder, closed answer vocabulary) with a 14-label CheXpert head, on "
      "PNG/JPEG images + JSONL {image, question, answer, labels}.",
      {"runs/vqa", /*epochs=*/6, /*synthetic_n=*/320});
  CLI::App& app = cli.app();
  CommonOptions& common = cli.common();
  cli.AddDataOptions("--data_path", &opt.data_path,
                     "JSONL file {image, question, answer, labels[14]}, or "
                     "a MIMIC-CXR data root: files/ (MIMIC-CXR-JPG images), "
                     "qa/ (MIMIC-Ext-CXR-QBA *.qa.json), "
                     "mimic-cxr-2.0.0-chexpert.csv",
                     &opt.val_fraction);
  app.add_option("--mimic_qa_path", opt.mimic_qa_path,
                 "Root of the qa/ question folder when it is not in the "
                 "--data_path root (MIMIC-Ext-CXR-QBA downloaded apart)");
  app.add_option("--image_size", opt.image_size,
                 "Images are resized to this square size");
  app.add_option("--width", opt.width,
                 "Image encoder channels of the first stage");
  cli.AddNormOptions(&opt.norm, &opt.sync_batchnorm);
  cli.AddBatchSize(&opt.guide.batch_size, "Micro-batch per rank");
  app.add_flag("--auto_optimize", opt.guide.auto_optimize,
               "Pick batch, accumulation, threads and precision from the "
               "hardware table for those not given as flags or in --config");
  app.add_option("--target_batch", opt.guide.target_batch,
                 "Effective batch --auto_optimize aims for (batch x "
                 "accumulation x world)");
  app.add_option("--zero", opt.guide.zero,
                 "Optimizer sharding: 0 = Adam + DDP, 1 = DDP + sharded Adam "
                 "state, 2 = sharded Adam that also reduces gradients (no "
                 "DDP)")
      ->check(CLI::Range(0, 2));
  app.add_option("--offload_optimizer", opt.guide.offload_optimizer,
                 "cpu: with --zero 1|2, this rank's Adam state shard lives in "
                 "host memory and its update runs on the CPU (DeepSpeed's "
                 "offload_optimizer; frees 8 bytes x parameters / world of "
                 "GPU memory, nothing on a CPU)")
      ->check(CLI::IsMember({"none", "cpu"}));
  app.add_option("--learning_rate", opt.learning_rate, "Adam learning rate");
  app.add_option("--label_weight", opt.label_weight,
                 "Weight of the CheXpert BCE term");
  app.add_option("--uncertain_policy", opt.uncertain_policy,
                 "CheXpert -1 labels: ignore (masked out of loss and AUROC), "
                 "zeros or ones")
      ->check(CLI::IsMember({"ignore", "zeros", "ones"}));
  app.add_option("--question_length", opt.question_length,
                 "Question tokens kept");
  app.add_option("--synthetic_format", opt.synthetic_format,
                 "Image format written by --make_synthetic: png or jpg "
                 "(--synthetic_layout mimic: jpg unless given)")
      ->check(CLI::IsMember({"png", "jpg"}));
  app.add_option("--synthetic_layout", opt.synthetic_layout,
                 "What --make_synthetic writes: jsonl (images/ + vqa.jsonl) "
                 "or mimic (the guide's MIMIC-CXR data root)")
      ->check(CLI::IsMember({"jsonl", "mimic"}));
  AddVqaGuideNames(cli);
  std::vector<std::string> args = SplitDeepSpeedJson(argc, argv);
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  if (auto code = cli.Parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data()))
    return *code;
  const NormKind norm = ParseNormKind(opt.norm, opt.sync_batchnorm);
  const bool mimic = opt.synthetic_layout == "mimic";
  if (cli.MakeSynthetic(
          [&] {
            if (!mimic) {
              return WriteSyntheticVqa(
                  common.make_synthetic, common.synthetic_n, opt.image_size,
                  common.seed, opt.synthetic_format == "jpg");
            }
            return WriteSyntheticMimic(common.make_synthetic,
                                       common.synthetic_n, opt.image_size,
                                       common.seed,
                                       !cli.IsSet("synthetic_format") ||
                                           opt.synthetic_format == "jpg");
          },
          mimic ? "MIMIC-CXR studies (files/, qa/, " +
                      std::string(kMimicLabelsCsv) + ")"
                : "questions",
          mimic ? "" : "vqa.jsonl")) {
    return 0;
  }
  TrainerCli::Require("--data_path", opt.data_path);

  TrainerSession session(cli);
  const dw::World& world = session.world();
  ApplyVqaGuideSettings(session, cli, &opt.guide);
  const UncertainPolicy policy =
      opt.uncertain_policy == "zeros"  ? UncertainPolicy::kZeros
      : opt.uncertain_policy == "ones" ? UncertainPolicy::kOnes
                                       : UncertainPolicy::kIgnore;
  const VqaData data =
      ValueOrThrow(ReadVqaData(opt.data_path, opt.mimic_qa_path, policy));
  const std::vector<VqaRecord>& records = data.records;
  session.LogMain("data: " + data.description);
  auto [train, val] =
      session.Split(records.size(), opt.val_fraction, opt.data_path, 32, 16);
  std::vector<std::string> questions, answers;
  for (int64_t i : train) {
    questions.push_back(records[i].question);
    answers.push_back(records[i].answer);
  }
  const Vocabulary vocab = Vocabulary::Build(questions);
  const LabelSet answer_set = LabelSet::Build(answers);
  const int64_t accum = common.gradient_accumulation_steps;
  session.LogMain(
      "vqa: " + std::to_string(train.size()) + " train / " +
      std::to_string(val.size()) + " val questions, " +
      DescribeAnswers(answer_set) + ", " + std::to_string(vocab.num_words()) +
      " question words, batch " + std::to_string(opt.guide.batch_size) +
      " x accumulation " + std::to_string(accum) + " x world " +
      std::to_string(world.world_size()) + " = effective " +
      std::to_string(opt.guide.batch_size * accum * world.world_size()) +
      ", zero " + std::to_string(opt.guide.zero) +
      (opt.guide.offload_optimizer == "cpu" ? " + CPU offload" : "") + ", " +
      NormKindName(norm) + " norm, " + session.precision().description);
  session.LogMain(DescribeUncertain(records, opt.uncertain_policy));

  VqaModelOptions model_options;
  model_options.vocab_size = vocab.size();
  model_options.num_answers = answer_set.size();
  model_options.width = opt.width;
  model_options.norm = norm;
  model_options.world = world;
  VqaModel model(model_options);
  session.PlaceOnDevice(*model);
  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<dw::ShardedAdam> sharded;
  const int zero = opt.guide.zero;
  if (zero == 0) {
    adam = std::make_unique<torch::optim::Adam>(
        model->parameters(), torch::optim::AdamOptions(opt.learning_rate));
  } else {
    dw::ShardedAdamOptions so;
    so.lr = opt.learning_rate;
    so.reduce_gradients = zero == 2;
    so.offload_to_cpu = opt.guide.offload_optimizer == "cpu";
    sharded = std::make_unique<dw::ShardedAdam>(world, model->parameters(), so);
  }
  session.LogMain(DescribeOptimizerState(*model, sharded.get()));
  TrainingSetup setup;
  setup.model = model.ptr();
  setup.optimizer = adam.get();
  setup.sharded_optimizer = sharded.get();
  setup.use_ddp = zero < 2;  // ZeRO-2 reduces gradients itself
  session.Prepare(setup);

  auto load = [&](const std::vector<int64_t>& positions) -> StatusOr<Batch> {
    std::vector<torch::Tensor> images, tokens, labels, mask;
    std::vector<int64_t> answer_ids;
    for (int64_t p : positions) {
      const VqaRecord& r = records[p];
      DDP_ASSIGN_OR_RETURN(
          torch::Tensor image,
          AtRow(r.where, ReadGrayImage(r.image, opt.image_size)));
      images.push_back(image);
      tokens.push_back(
          torch::tensor(vocab.Encode(r.question, opt.question_length)));
      answer_ids.push_back(answer_set.Index(r.answer));  // -1: unseen, ignored
      labels.push_back(torch::tensor(r.labels));
      mask.push_back(torch::tensor(r.mask));
    }
    return Batch{torch::stack(images), torch::stack(tokens),
                 torch::tensor(answer_ids), torch::stack(labels),
                 torch::stack(mask)};
  };
  auto load_train = [&](const std::vector<int64_t>& positions) {
    std::vector<int64_t> items;
    for (int64_t p : positions) items.push_back(train[p]);
    return load(items);
  };
  auto losses = [&](Batch& b, torch::Tensor* answer_logits,
                    torch::Tensor* label_logits) {
    ToDevice(world.device(),
             {&b.images, &b.tokens, &b.answers, &b.labels, &b.mask});
    {
      auto autocast = session.Autocast();
      std::tie(*answer_logits, *label_logits) =
          model->forward(b.images, b.tokens);
    }
    torch::Tensor ce = torch::nn::functional::cross_entropy(
        answer_logits->to(torch::kFloat32), b.answers,
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
    torch::Tensor bce = torch::binary_cross_entropy_with_logits(
        label_logits->to(torch::kFloat32), b.labels, b.mask, {},
        at::Reduction::Sum);
    return ce + opt.label_weight * bce / b.mask.sum().clamp_min(1.0);
  };

  LoopConfig loop;
  loop.dataset_size = static_cast<int64_t>(train.size());
  loop.micro_batch = opt.guide.batch_size;
  loop.accumulation = accum;
  loop.best = {"val_answer_accuracy", /*higher_is_better=*/true};
  auto step = [&](std::vector<Batch>& micro) {
    model->train();
    return session.Step(micro.size(), [&](int64_t m) {
      torch::Tensor a, l;
      return losses(micro[m], &a, &l);
    });
  };
  auto validate = [&](int64_t epoch) -> nlohmann::json {
    torch::NoGradGuard no_grad;
    model->eval();
    // Without DDP (--zero 2) nothing keeps the ranks' batch-norm statistics
    // equal; every rank must evaluate with the same ones.
    const double norm_spread =
        norm == NormKind::kGroup ? 0.0 : AlignBuffersWithRank0(world, *model);
    std::vector<torch::Tensor> rows;
    for (const auto& items :
         MakeBatches(RankShare(world, val), opt.guide.batch_size, false)) {
      Batch b = ValueOrThrow(load(items));
      torch::Tensor a, l;
      losses(b, &a, &l);
      torch::Tensor correct =
          a.argmax(1).eq(b.answers).to(torch::kFloat32).unsqueeze(1);
      rows.push_back(torch::cat(
          {correct, torch::sigmoid(l.to(torch::kFloat32)), b.labels, b.mask},
          1));
    }
    torch::Tensor local = rows.empty()
                              ? torch::zeros({0, 1 + 3 * kCheXpertLabels},
                                             torch::Device(world.device()))
                              : torch::cat(rows);
    const torch::Tensor all = world.AllGatherVariable(local).cpu();
    const int64_t k = kCheXpertLabels;
    const std::vector<double> aurocs =
        LabelAurocs(all.narrow(1, 1, k), all.narrow(1, 1 + k, k),
                    all.narrow(1, 1 + 2 * k, k));
    nlohmann::json per_label = nlohmann::json::object();
    for (int64_t i = 0; i < k; ++i) {
      per_label[CheXpertNames()[i]] =
          std::isnan(aurocs[i]) ? nlohmann::json() : nlohmann::json(aurocs[i]);
    }
    const double mean_auroc = MeanDefined(aurocs);
    nlohmann::json record = {
        {"val_answer_accuracy",
         all.size(0) ? all.select(1, 0).mean().item<double>() : 0.0},
        {"val_mean_auroc", mean_auroc},
        {"val_questions", all.size(0)},
        {"label_auroc", per_label}};
    if (norm != NormKind::kGroup)
      record["norm_stats_rank_spread"] = norm_spread;
    if (world.is_main()) EmitAurocChart(session, aurocs, epoch, mean_auroc);
    return record;
  };
  session.Run<Batch>(loop, {nullptr, load_train, step, validate});
  const auto& last = session.last_metrics();
  session.Done("answer accuracy " +
               std::to_string(last.value("val_answer_accuracy", 0.0)) +
               ", mean AUROC " +
               std::to_string(last.value("val_mean_auroc", 0.0)));
  return 0;
}

}  // namespace
}  // namespace ddprun::examples

int main(int argc, char** argv) {
  return ddprun::worker::RunMain(
      [&] { return ddprun::examples::Train(argc, argv); });
}
