#include "examples/vqa/vqa_step.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "examples/frame/batch_loader.h"
#include "examples/frame/eval_metrics.h"
#include "examples/frame/trainer_support.h"
#include "examples/vqa/vqa_data.h"
#include "examples/vqa/vqa_report.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;

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

void BatchToDevice(const dw::World& world, VqaBatch& b) {
  ToDevice(world.device(),
           {&b.images, &b.tokens, &b.answers, &b.labels, &b.mask});
}

}  // namespace

VqaModel MakeVqaModel(const VqaOptions& opt, int64_t vocab_size,
                      int64_t num_answers, NormKind norm,
                      const worker::World& world) {
  VqaModelOptions model_options;
  model_options.vocab_size = vocab_size;
  model_options.num_answers = num_answers;
  model_options.width = opt.width;
  model_options.norm = norm;
  model_options.world = world;
  return VqaModel(model_options);
}

VqaOptimizer MakeVqaOptimizer(const VqaOptions& opt, const worker::World& world,
                              std::vector<torch::Tensor> params) {
  VqaOptimizer optimizer;
  const int zero = opt.guide.zero;
  if (zero == 0) {
    optimizer.adam = std::make_unique<torch::optim::Adam>(
        std::move(params), torch::optim::AdamOptions(opt.learning_rate));
  } else {
    dw::ShardedAdamOptions so;
    so.lr = opt.learning_rate;
    so.reduce_gradients = zero == 2;
    so.offload_to_cpu = opt.guide.offload_optimizer == "cpu";
    optimizer.sharded =
        std::make_unique<dw::ShardedAdam>(world, std::move(params), so);
  }
  return optimizer;
}

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

double VqaTrainStep(TrainerSession& session, VqaModel& model,
                    const VqaOptions& opt, std::vector<VqaBatch>& micro) {
  model->train();
  return session.Step(micro.size(), [&](int64_t m) {
    BatchToDevice(session.world(), micro[m]);
    torch::Tensor a, l;
    return VqaLoss(model, micro[m], opt.label_weight,
                   [&] { return session.Autocast(); }, &a, &l);
  });
}

nlohmann::json ValidateVqa(
    TrainerSession& session, VqaModel& model, const VqaOptions& opt,
    NormKind norm, const std::vector<int64_t>& val,
    const std::function<StatusOr<VqaBatch>(const std::vector<int64_t>&)>& load,
    int64_t epoch) {
  const dw::World& world = session.world();
  torch::NoGradGuard no_grad;
  model->eval();
  // Without DDP (--zero 2) nothing keeps the ranks' batch-norm statistics
  // equal; every rank must evaluate with the same ones.
  const double norm_spread =
      norm == NormKind::kGroup ? 0.0 : AlignBuffersWithRank0(world, *model);
  std::vector<torch::Tensor> rows;
  for (const auto& items :
       MakeBatches(RankShare(world, val), opt.guide.batch_size, false)) {
    VqaBatch b = ValueOrThrow(load(items));
    BatchToDevice(world, b);
    torch::Tensor a, l;
    VqaLoss(model, b, opt.label_weight, [&] { return session.Autocast(); },
            &a, &l);
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
  if (norm != NormKind::kGroup) record["norm_stats_rank_spread"] = norm_spread;
  if (world.is_main()) EmitAurocChart(session, aurocs, epoch, mean_auroc);
  return record;
}

}  // namespace ddprun::examples
