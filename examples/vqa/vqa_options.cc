#include "examples/vqa/vqa_options.h"

#include "examples/vqa/vqa_mimic.h"
#include "examples/vqa/vqa_synthetic.h"

namespace ddprun::examples {

VqaCli::VqaCli()
    : cli_("vqa_trainer: chest X-ray VQA (CNN image encoder + GRU question "
           "encoder, closed answer vocabulary) with a 14-label CheXpert "
           "head, on PNG/JPEG images + JSONL {image, question, answer, "
           "labels}.",
           {"runs/vqa", /*epochs=*/6, /*synthetic_n=*/320}) {
  VqaOptions& opt = options_;
  CLI::App& app = cli_.app();
  cli_.AddDataOptions("--data_path", &opt.data_path,
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
  cli_.AddNormOptions(&opt.norm, &opt.sync_batchnorm);
  cli_.AddBatchSize(&opt.guide.batch_size, "Micro-batch per rank");
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
  AddVqaGuideNames(cli_);
}

std::optional<int> VqaCli::Parse(int argc, char** argv) {
  args_ = SplitDeepSpeedJson(argc, argv);
  std::vector<char*> arg_ptrs;
  for (std::string& a : args_) arg_ptrs.push_back(a.data());
  if (auto code =
          cli_.Parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data()))
    return code;
  norm_ = ParseNormKind(options_.norm, options_.sync_batchnorm);
  return std::nullopt;
}

bool VqaCli::MakeSynthetic() {
  const VqaOptions& opt = options_;
  const CommonOptions& common = cli_.common();
  const bool mimic = opt.synthetic_layout == "mimic";
  if (cli_.MakeSynthetic(
          [&] {
            if (!mimic) {
              return WriteSyntheticVqa(
                  common.make_synthetic, common.synthetic_n, opt.image_size,
                  common.seed, opt.synthetic_format == "jpg");
            }
            return WriteSyntheticMimic(common.make_synthetic,
                                       common.synthetic_n, opt.image_size,
                                       common.seed,
                                       !cli_.IsSet("synthetic_format") ||
                                           opt.synthetic_format == "jpg");
          },
          mimic ? "MIMIC-CXR studies (files/, qa/, " +
                      std::string(kMimicLabelsCsv) + ")"
                : "questions",
          mimic ? "" : "vqa.jsonl")) {
    return true;
  }
  TrainerCli::Require("--data_path", opt.data_path);
  return false;
}

void VqaCli::ApplyGuideSettings(TrainerSession& session) {
  ApplyVqaGuideSettings(session, cli_, &options_.guide);
}

UncertainPolicy VqaCli::uncertain_policy() const {
  const std::string& p = options_.uncertain_policy;
  return p == "zeros"  ? UncertainPolicy::kZeros
         : p == "ones" ? UncertainPolicy::kOnes
                       : UncertainPolicy::kIgnore;
}

}  // namespace ddprun::examples
