#include "examples/vqa/vqa_guide.h"

#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/errors.h"
#include "ddprun/worker/hardware.h"

namespace ddprun::examples {
namespace {

namespace dw = ddprun::worker;
using Arity = ForeignFlag::Arity;

bool IsFalse(const std::string& v) {
  return v == "false" || v == "False" || v == "no" || v == "off" || v == "0";
}

// The guide's DeepSpeed switch in any of its spellings.
bool DeepSpeedRequested(const TrainerCli& cli) {
  if (cli.ForeignValue("use_deepspeed")) return true;
  if (auto v = cli.ForeignValue("deepspeed"); v && !IsFalse(*v)) return true;
  if (auto v = cli.ForeignValue("deepspeed.enabled"); v && !IsFalse(*v))
    return true;
  return false;
}

// The table's "Mixed precision" on these GPUs: bf16 where every GPU has it
// (compute capability 8.0 on: A100, L4, H100), else fp16 with loss scaling
// (T4, V100), as the guide's FP16.
std::string MixedPrecisionFor(const dw::HardwareInfo& hw) {
  for (const dw::GpuInfo& g : hw.gpus) {
    if (g.compute_major < 8) return "fp16";
  }
  return "bf16";
}

// --auto_optimize: batch, accumulation and precision from the hardware
// table for those of them that neither a flag nor the config file set.
// Returns whether the guide would pick DeepSpeed (2+ GPUs).
bool AutoOptimize(TrainerSession& session, const TrainerCli& cli,
                  VqaGuideSettings* s) {
  const dw::World& world = session.world();
  const dw::HardwareInfo hw = dw::DetectHardware();
  const dw::AutoSettings a =
      dw::RecommendSettings(hw, world.world_size(), world.local_world_size(),
                            static_cast<int>(s->target_batch));
  CommonOptions& common = session.common();
  std::string kept;
  if (cli.IsSet("batch_size")) {
    kept += " --batch_size";
  } else {
    s->batch_size = a.per_device_batch;
  }
  if (cli.IsSet("gradient_accumulation_steps")) {
    kept += " --gradient_accumulation_steps";
  } else {
    common.gradient_accumulation_steps = a.grad_accum_steps;
  }
  if (cli.IsSet("amp") || cli.IsSet("mixed_precision")) {
    kept += " --amp";
  } else if (a.mixed_precision) {
    common.amp = MixedPrecisionFor(hw);
  }
  torch::set_num_threads(std::max(1, a.cpu_threads));
  const bool gpus = !world.device().is_cpu() && world.world_size() > 1;
  session.LogMain(
      "auto_optimize: " + a.reason +
      (gpus ? "; 2+ GPUs: DeepSpeed ZeRO-2 as the guide picks it"
            : "; DDP (the guide's DeepSpeed choice is for 2+ GPUs)") +
      (kept.empty() ? "" : "; given, so kept:" + kept));
  return gpus;
}

// The guide's DeepSpeed config on our optimizer, for the settings not given.
void ApplyDeepSpeed(TrainerSession& session, const TrainerCli& cli,
                    VqaGuideSettings* s) {
  const bool gpu = !session.world().device().is_cpu();
  std::vector<std::string> set;
  std::string kept;
  if (cli.IsSet("zero")) {
    kept += " --zero";
  } else {
    s->zero = 2;
    set.push_back("ZeRO-2 (--zero 2)");
  }
  if (cli.IsSet("offload_optimizer")) {
    kept += " --offload_optimizer";
  } else if (gpu) {
    s->offload_optimizer = "cpu";
    set.push_back("optimizer offload to the CPU (--offload_optimizer cpu)");
  }
  CommonOptions& common = session.common();
  if (cli.IsSet("amp") || cli.IsSet("mixed_precision")) {
    kept += " --mixed_precision";
  } else if (gpu && common.amp.empty()) {  // else --auto_optimize chose
    common.mixed_precision = "fp16";
    set.push_back("fp16 with dynamic loss scaling");
  }
  std::string line =
      "deepspeed: the guide's DeepSpeed config on our sharded Adam: ";
  for (size_t i = 0; i < set.size(); ++i) line += (i ? ", " : "") + set[i];
  if (set.empty()) line += "nothing left to set";
  // What a GPU would have got and the CPU does not need.
  std::string skipped;
  if (!gpu && !cli.IsSet("offload_optimizer")) skipped += " offload";
  if (!gpu && !cli.IsSet("amp") && !cli.IsSet("mixed_precision"))
    skipped += skipped.empty() ? " fp16" : " or fp16";
  if (!skipped.empty())
    line += "; no" + skipped + " on the CPU (nothing to gain there)";
  if (!kept.empty()) line += "; given, so kept:" + kept;
  session.LogMain(line);
}

}  // namespace

std::vector<std::string> SplitDeepSpeedJson(int argc, char** argv) {
  static const char* const kBooleans[] = {
      "true", "false", "True", "False", "yes", "no", "on", "off", "1", "0"};
  auto is_file = [](const std::string& v) {
    if (v.empty() || v[0] == '-') return false;
    for (const char* b : kBooleans) {
      if (v == b) return false;
    }
    std::error_code ec;
    return std::filesystem::is_regular_file(v, ec);
  };
  std::vector<std::string> args(argv, argv + argc);
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i > 0 && a.rfind("--deepspeed=", 0) == 0 && is_file(a.substr(12))) {
      out.push_back("--deepspeed");
      out.push_back("--deepspeed_config=" + a.substr(12));
    } else if (i > 0 && a == "--deepspeed" && i + 1 < args.size() &&
               is_file(args[i + 1])) {
      out.push_back(a);
      out.push_back("--deepspeed_config");
      out.push_back(args[++i]);
    } else {
      out.push_back(a);
    }
  }
  return out;
}

void AddVqaGuideNames(TrainerCli& cli) {
  cli.AddAliases({
      // mimic-cxr-vqa.md: its batch is per GPU like ours.
      {"batch_size_per_gpu", "batch_size", ""},
      {"no_auto_optimize", "auto_optimize", "false"},
      // train_mimic_cxr.py's data flags and its config's data: keys.
      {"data_root", "data_path", ""},
      {"mimic_cxr_path", "data_path", ""},
      {"mimic_cxr_jpg_path", "data_path", ""},
      {"mimic_ext_cxr_qba_path", "mimic_qa_path", ""},
      {"chexpert_loss_weight", "label_weight", ""},
      {"max_question_length", "question_length", ""},
      // The YAML's deepspeed: section (its other keys are noted).
      {"deepspeed.stage", "zero", ""},
      // configs/deepspeed_config.json (--deepspeed_config).
      {"zero_optimization.stage", "zero", ""},
      {"zero_optimization.offload_optimizer.device", "offload_optimizer", ""},
      {"fp16.enabled", "mixed_precision", "fp16"},
      {"bf16.enabled", "mixed_precision", "bf16"},
      {"train_micro_batch_size_per_gpu", "batch_size", ""},
      {"optimizer.params.lr", "learning_rate", ""},
  });
  ConfigFileOption ds;
  ds.name = "deepspeed_config";
  ds.help =
      "DeepSpeed JSON config (configs/deepspeed_config.json): "
      "zero_optimization.stage -> --zero, offload_optimizer.device -> "
      "--offload_optimizer, fp16/bf16.enabled -> --mixed_precision, "
      "gradient_accumulation_steps, train_micro_batch_size_per_gpu -> "
      "--batch_size, optimizer.params.lr; other keys are listed in one note "
      "line and ignored. Flags override it; values it shares with --config "
      "must agree";
  ds.note_unknown_keys = true;
  ds.unknown_note = "DeepSpeed settings with no counterpart here, ignored";
  cli.AddConfigFile(ds);
  const std::string deepspeed =
      "no DeepSpeed library here; its ZeRO-2 runs on our sharded Adam: "
      "--zero 2 and, on a GPU, --offload_optimizer cpu and fp16 loss "
      "scaling (the guide's DeepSpeed config), for those not set by a flag "
      "or config; a DeepSpeed JSON is read with --deepspeed FILE or "
      "--deepspeed_config FILE";
  const std::string checkpointing =
      "no activation checkpointing in vqa: its 64x64 encoder keeps a few MB "
      "of activations per batch of 16; trade memory with a smaller "
      "--batch_size and more --gradient_accumulation_steps";
  cli.AddForeignFlags({
      {"use_deepspeed", Arity::kNone, deepspeed},
      {"deepspeed", Arity::kOptional, deepspeed},
      {"deepspeed.enabled", Arity::kNone, deepspeed},
      {"gradient_checkpointing", Arity::kNone, checkpointing},
      {"activation_checkpointing", Arity::kNone, checkpointing},
      {"train_batch_size", Arity::kOne,
       "DeepSpeed's global batch (micro-batch x accumulation x world) is "
       "not set directly: the trainer logs the effective batch it trains "
       "with"},
      {"zero_optimization.offload_optimizer.pin_memory", Arity::kNone,
       "the offloaded optimizer state is always in pinned host memory when "
       "the model is on a GPU"},
  });
}

void ApplyVqaGuideSettings(TrainerSession& session, const TrainerCli& cli,
                           VqaGuideSettings* settings) {
  bool deepspeed = DeepSpeedRequested(cli);
  if (settings->auto_optimize)
    deepspeed = AutoOptimize(session, cli, settings) || deepspeed;
  if (deepspeed) ApplyDeepSpeed(session, cli, settings);
  if (settings->offload_optimizer == "cpu" && settings->zero == 0) {
    throw dw::ConfigError(
        "--offload_optimizer cpu needs --zero 1 or 2: it offloads the "
        "sharded optimizer's state (DeepSpeed's ZeRO-Offload)");
  }
}

}  // namespace ddprun::examples
