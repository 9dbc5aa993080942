#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "examples/frame/norm_layer.h"
#include "examples/frame/trainer_cli.h"
#include "examples/frame/trainer_session.h"
#include "examples/vqa/vqa_data.h"
#include "examples/vqa/vqa_guide.h"

namespace ddprun::examples {

// vqa_trainer's own options. The defaults are the trainer's (what --help
// shows); bench/model_step builds its step from them too.
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

// The trainer's command line: TrainerCli (output runs/vqa, 6 epochs, --n
// 320) with the options above and the guide's names (AddVqaGuideNames:
// DeepSpeed's JSON, --deepspeed FILE, ...).
class VqaCli {
 public:
  VqaCli();

  // TrainerCli::Parse of argv after SplitDeepSpeedJson, then the norm
  // (ParseNormKind). 0 after --help, nullopt to continue; throws
  // worker::ConfigError (exit 2) for bad input.
  std::optional<int> Parse(int argc, char** argv);

  // With --make_synthetic DIR: writes the synthetic questions (jsonl or
  // the MIMIC-CXR layout) and returns true (the caller exits 0); else
  // requires --data_path and returns false.
  bool MakeSynthetic();

  // After TrainerSession: ApplyVqaGuideSettings to the options' guide part.
  void ApplyGuideSettings(TrainerSession& session);

  const VqaOptions& options() const { return options_; }
  NormKind norm() const { return norm_; }
  UncertainPolicy uncertain_policy() const;
  CommonOptions& common() { return cli_.common(); }
  TrainerCli& trainer() { return cli_; }

 private:
  TrainerCli cli_;
  VqaOptions options_;
  NormKind norm_ = NormKind::kGroup;
  std::vector<std::string> args_;  // argv as parsed
};

}  // namespace ddprun::examples
